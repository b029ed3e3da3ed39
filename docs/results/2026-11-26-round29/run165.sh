#!/bin/bash
# Round 29, run 165 (one GPU): issue 28 item 2, the shipped form: FP8-KV on the Hopper family
# with run 163's decode order (K(u), V(u); run 164's K-ahead order was 6-16 % slower), dispatched
# for non-causal FP8-KV at D128 (and D64 fp16 from S 1k). Verify the three tiles again, the GPU
# tests (the new hopper_fp8_kv test among them), then the fp8 suite's FP8-KV rows through
# dispatch beside the fa suite's 16-bit rows, same run. Detached in /tmp/r165; polled.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache /tmp/r165
R=/tmp/r165
PO=hopper.m128.n128.w12.s2.b1.w4pogex; G=hopper.m128.n128.w12.s2.b1.w4ogex; O=hopper.m128.n128.w12.s2.b1.w4oex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 240 sdpa-lab verify --variant $PO --variant $G --variant $O --filter fp8kv --quick --seeds 2 --no-codec --json $R/v.json > $R/v.log 2>&1; el "verify fp8kv hopper rc=\$?"
grep "verify:" $R/v.log | tail -1 >> $R/log; grep -iE "fail" $R/v.log | grep -v "^spec" | head -8 >> $R/log
timeout -s KILL 120 compute-sanitizer --tool racecheck --error-exitcode 9 sdpa-lab verify --filter $PO/fp8kv_bf16/d128/full --quick --seeds 1 --no-codec --json /tmp/s.json > $R/san.log 2>&1; el "racecheck $PO fp8kv_bf16 d128 rc=\$?"
grep -E "RACECHECK SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
timeout -s KILL 300 .device/tests/gpu-test --include-ignored > $R/gputest.log 2>&1; el "gpu tests rc=\$?"
grep -E "test result|FAILED|panicked" $R/gputest.log | head -8 >> $R/log
touch $R/checks.done
timeout -s KILL 150 sdpa-lab bench --suite fa --quick --precision f16,bf16 --no-ceilings --out $R/fa.json > /dev/null 2>&1; el "bench fa quick rc=\$?"
timeout -s KILL 240 sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --no-ceilings --out $R/kv.json > /dev/null 2>&1; el "bench fp8kv (dispatch) rc=\$?"
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 ${1:-100}); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
