#!/bin/bash
# Round 28, run 158 (one GPU): issue 27, paged decode with the block-table entries loaded a step
# ahead (PageSpan) instead of on the copy path of every step. Verify every decode spec (dense,
# paged, varlen; quick, two seeds), memcheck on paged specs, then the decode suite (fp16 and
# FP8-KV, contiguous and paged) with this build and the base (a7b5d95, .device/base; decode.cu unchanged since), two
# interleaved passes. Detached in /tmp/r158; polled.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache /tmp/r158
R=/tmp/r158
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 300 sdpa-lab verify --filter decode --quick --seeds 2 --no-codec --json $R/verify.json > $R/verify.log 2>&1; el "verify decode rc=\$?"
grep "verify:" $R/verify.log >> $R/log
grep -iE "fail" $R/verify.log | grep -v "^spec" | head -12 >> $R/log
for S in decode.m16.n64.w4.s3.b2.cex/fp8kv_f16/d128 decode.m16.n64.w4.s3.b2.cex/f16/d128; do
  timeout -s KILL 200 compute-sanitizer --tool memcheck --error-exitcode 9 sdpa-lab verify --filter \$S --quick --seeds 1 --no-codec --json $R/s.json > $R/san.log 2>&1; el "memcheck \$S rc=\$?"
  grep -E "ERROR SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
done
touch $R/checks.done
for pass in 1 2; do
  timeout -s KILL 150 .device/base/sdpa-lab bench --suite decode --no-ceilings --out $R/base\$pass.json > /dev/null 2>&1; el "bench decode base \$pass rc=\$?"
  timeout -s KILL 150 sdpa-lab bench --suite decode --no-ceilings --out $R/new\$pass.json > /dev/null 2>&1; el "bench decode new \$pass rc=\$?"
done
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 112); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
