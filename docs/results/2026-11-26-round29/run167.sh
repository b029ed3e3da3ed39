#!/bin/bash
# Round 29, run 167 (one GPU): issue 28 item 2, the dispatch of FP8-KV on the Hopper family.
# Run 166 (loads in flight, producer at 64 registers) led the portable FP8-KV tiles at every
# quick fp8 row but D64 fp16 non-causal (a tie, 9 % below run 165's build). This build: D64's
# producer back at 56 registers (consumers 224), dispatch sending all FP8-KV at D64/D128 to the
# persistent Hopper tile. Verify D64 again, then the full fp8 suite's FP8-KV rows through this
# dispatch, the base build's (4c34437, portable FP8-KV), the 16-bit fa suite, and run 166's
# build at D64, all in one run. Detached in /tmp/r167; polled.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache /tmp/r167
R=/tmp/r167
PO=hopper.m128.n128.w12.s2.b1.w4pogex; G=hopper.m128.n128.w12.s2.b1.w4ogex; O=hopper.m128.n128.w12.s2.b1.w4oex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 200 sdpa-lab verify --variant $PO --variant $G --variant $O --filter fp8kv_ --quick --seeds 2 --no-codec --json $R/v.json > $R/v.log 2>&1; el "verify fp8kv hopper rc=\$?"
grep "verify:" $R/v.log | tail -1 >> $R/log; grep -iE "fail" $R/v.log | grep -v "^spec" | head -8 >> $R/log
timeout -s KILL 120 compute-sanitizer --tool racecheck --error-exitcode 9 sdpa-lab verify --filter $PO/fp8kv_f16/d64/causal --quick --seeds 1 --no-codec --json /tmp/s.json > $R/san.log 2>&1; el "racecheck d64 rc=\$?"
grep -E "RACECHECK SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
touch $R/checks.done
timeout -s KILL 240 sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --filter d --no-ceilings --out $R/kv.json > /dev/null 2>&1; el "bench fp8kv dispatch rc=\$?"
timeout -s KILL 240 .device/base/sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --no-ceilings --out $R/base.json > /dev/null 2>&1; el "bench fp8kv base rc=\$?"
timeout -s KILL 240 sdpa-lab bench --suite fa --precision f16,bf16 --no-ceilings --out $R/fa.json > /dev/null 2>&1; el "bench fa rc=\$?"
timeout -s KILL 120 .device/r64/sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --filter d64 --variant $PO --no-ceilings --out $R/r64.json > /dev/null 2>&1; el "bench r64 d64 rc=\$?"
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 ${1:-100}); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
