#!/bin/bash
# Round 27, run 150 (one GPU): issue 31, variable-length batches on the Hopper family
# (SDPA_VARLEN: tensor maps over the packed tensors, the scheduler cuts each sequence out,
# O stored from registers) and on the decode family (contiguous and paged, packed queries).
# Verify every registered Hopper and decode spec, dense and varlen shapes (--quick, two seeds);
# the varlen GPU test binaries; memcheck and racecheck on Hopper varlen defaults (their verify
# runs include the varlen shapes) and on the bad-offsets tests; a same-run fa bench of the
# dense defaults, this build against the base build (e7dac06), two interleaved passes.
# Detached in /tmp/r150 (stage log /tmp/r150/log).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
export SDPA_NVRTC_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib
mkdir -p artifacts/cache /tmp/r150
R=/tmp/r150
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 400 sdpa-lab verify --filter hopper --quick --seeds 2 --no-codec --json $R/verify_hopper.json > $R/verify_hopper.log 2>&1; el "verify hopper rc=\$?"
grep "verify:" $R/verify_hopper.log >> $R/log; grep "^FAIL" $R/verify_hopper.log | head -8 >> $R/log
timeout -s KILL 400 sdpa-lab verify --filter decode --quick --seeds 2 --no-codec --json $R/verify_decode.json > $R/verify_decode.log 2>&1; el "verify decode rc=\$?"
grep "verify:" $R/verify_decode.log >> $R/log; grep "^FAIL" $R/verify_decode.log | head -8 >> $R/log
timeout -s KILL 300 .device/tests/gpu_varlen-test --include-ignored > $R/gpu_varlen.log 2>&1; el "gpu_varlen tests rc=\$?"; grep -E "test result|FAILED|panicked" $R/gpu_varlen.log | head -5 >> $R/log
timeout -s KILL 200 .device/tests/attn_varlen_gpu-test --include-ignored > $R/attn_varlen.log 2>&1; el "attn_varlen tests rc=\$?"; grep -E "test result|FAILED|panicked" $R/attn_varlen.log | head -5 >> $R/log
for S in hopper.m128.n128.w12.s2.b1.w4pogex/f16/d128/full hopper.m128.n128.w12.s2.b1.w4oex/bf16/d128/causal hopper.m128.n128.w12.s2.b1.w4pogex/bf16/d64/causal; do
  for tool in memcheck racecheck; do
    timeout -s KILL 200 compute-sanitizer --tool \$tool --error-exitcode 9 sdpa-lab verify --filter \$S --quick --seeds 1 --no-codec --json $R/s.json > $R/san.log 2>&1; el "\$tool \$S rc=\$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
  done
done
timeout -s KILL 300 compute-sanitizer --tool memcheck --error-exitcode 9 .device/tests/gpu_varlen-test --include-ignored bad_offsets > $R/san2.log 2>&1; el "memcheck bad_offsets tests rc=\$?"
grep -E "ERROR SUMMARY|test result" $R/san2.log | tail -2 >> $R/log
touch $R/checks.done
for pass in 1 2; do
  timeout -s KILL 150 .device/base/sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $R/base\$pass.json > /dev/null 2>&1; el "bench base pass \$pass rc=\$?"
  timeout -s KILL 150 sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $R/new\$pass.json > /dev/null 2>&1; el "bench new pass \$pass rc=\$?"
done
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 110); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
