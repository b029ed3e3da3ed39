#!/bin/bash
# Round 28, run 156 (one GPU): issues 28 and 26's Hopper family. ptxas hoisted the wait for P.V
# to the top of its basic block, before the softmax it should overlap (SASS; ncu run 155: the
# consumers' stalls). The K release's branch now closes the block after the softmax, in both
# Hopper kernels. Verify every Hopper tile, sanitizers on the changed overlapped tiles, the fp8
# suite with cuDNN's FP8 (this build), and the same rows from run 153's build (.device/step1,
# 0440dbb) and the round's base (.device/base, a7b5d95); the 16-bit fa rows, step1 against this
# build, two interleaved passes. Detached in /tmp/r156; polled.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/cudnn/*.whl || exit 1
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache PYTHONPATH=/tmp/site
mkdir -p artifacts/cache /tmp/r156
R=/tmp/r156
PO=hopper.m128.n128.w12.s2.b1.w4pogex; O=hopper.m128.n128.w12.s2.b1.w4oex; G80=hopper.m128.n80.w12.s2.b1.w4ogex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 330 sdpa-lab verify --filter hopper --quick --seeds 2 --no-codec --json $R/verify.json > $R/verify.log 2>&1; el "verify hopper rc=\$?"
grep "verify:" $R/verify.log >> $R/log
grep -iE "fail" $R/verify.log | grep -v "^spec" | head -12 >> $R/log
for S in $PO/fp8/d128/full:memcheck $PO/fp8/d128/full:racecheck $O/fp8/d128/causal:racecheck $PO/f16/d128/full:racecheck $PO/f16/d64/causal:racecheck $G80/bf16/d256/full:memcheck; do
  tool=\${S#*:}; spec=\${S%:*}
  timeout -s KILL 150 compute-sanitizer --tool \$tool --error-exitcode 9 sdpa-lab verify --filter \$spec --quick --seeds 1 --no-codec --json $R/s.json > $R/san.log 2>&1; el "\$tool \$spec rc=\$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
done
touch $R/checks.done
timeout -s KILL 280 sdpa-lab bench --suite fp8 --quick --precision fp8 --peers --out $R/fp8peers.json > $R/fp8peers.log 2>&1; el "bench fp8 peers rc=\$?"
timeout -s KILL 120 .device/step1/sdpa-lab bench --suite fp8 --quick --precision fp8 --no-ceilings --out $R/fp8step1.json > /dev/null 2>&1; el "bench fp8 step1 rc=\$?"
timeout -s KILL 120 .device/base/sdpa-lab bench --suite fp8 --quick --precision fp8 --no-ceilings --out $R/fp8base.json > /dev/null 2>&1; el "bench fp8 base rc=\$?"
for pass in 1 2; do
  timeout -s KILL 100 .device/step1/sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $R/base\$pass.json > /dev/null 2>&1; el "bench fa step1 pass \$pass rc=\$?"
  timeout -s KILL 100 sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $R/new\$pass.json > /dev/null 2>&1; el "bench fa new pass \$pass rc=\$?"
done
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 112); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
