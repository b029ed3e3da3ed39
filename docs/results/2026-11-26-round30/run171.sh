#!/bin/bash
# Round 30, run 171 (one GPU): issue 28 item 2, the FP8-KV decoder's fourth design: codes from
# global memory into registers (a whole tile's passes in flight), no code ring in shared memory
# (.device/bin), the same with an L2 prefetch two key blocks ahead by thread 0 (.device/pf),
# against the shipped round-29 build (.device/ship, 3a5c2b3). Verify and sanitize the new
# build's Hopper FP8-KV tiles, then the fp8 suite's FP8-KV rows on the persistent tile (the
# default) for each build and the 16-bit fa suite, all in one run. Detached in /tmp/r171.
# (Its first attempt hung in verify: tiles without key blocks, causal rows before the first key,
# never got their Q. A 60-second smoke now comes first and stops the job on a hang.)
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache /tmp/r171
R=/tmp/r171
PO=hopper.m128.n128.w12.s2.b1.w4pogex; G=hopper.m128.n128.w12.s2.b1.w4ogex; O=hopper.m128.n128.w12.s2.b1.w4oex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
for b in bin pf; do
  timeout -s KILL 60 .device/\$b/sdpa-lab verify --variant $PO --filter fp8kv_f16/d128/causal --quick --seeds 1 --no-codec --json /tmp/smoke.json > $R/smoke.log 2>&1; rc=\$?; el "smoke \$b rc=\$rc"
  grep "verify:" $R/smoke.log | tail -1 >> $R/log
  [ \$rc = 137 ] && { touch $R/checks.done $R/all.done; exit; }
done
timeout -s KILL 120 sdpa-lab verify --variant $PO --variant $G --variant $O --filter fp8kv_ --quick --seeds 2 --no-codec --json $R/v.json > $R/v.log 2>&1; el "verify new rc=\$?"
grep "verify:" $R/v.log | tail -1 >> $R/log; grep -iE "fail" $R/v.log | grep -v "^spec" | head -8 >> $R/log
timeout -s KILL 120 .device/pf/sdpa-lab verify --variant $PO --filter fp8kv_ --quick --seeds 1 --no-codec --json $R/vp.json > $R/vp.log 2>&1; el "verify pf rc=\$?"
grep "verify:" $R/vp.log | tail -1 >> $R/log
for f in d128/causal d64/full; do for t in racecheck memcheck; do
  timeout -s KILL 120 compute-sanitizer --tool \$t --error-exitcode 9 sdpa-lab verify --filter $PO/fp8kv_f16/\$f --quick --seeds 1 --no-codec --json /tmp/s.json > $R/san.log 2>&1; el "\$t \$f rc=\$?"
  grep -E "SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
done; done
touch $R/checks.done
timeout -s KILL 240 sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --variant $PO --no-ceilings --out $R/new.json > /dev/null 2>&1; el "bench new rc=\$?"
timeout -s KILL 240 .device/ship/sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --variant $PO --no-ceilings --out $R/ship.json > /dev/null 2>&1; el "bench ship rc=\$?"
timeout -s KILL 240 .device/pf/sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --variant $PO --filter d128 --no-ceilings --out $R/pf.json > /dev/null 2>&1; el "bench pf d128 rc=\$?"
timeout -s KILL 240 sdpa-lab bench --suite fa --precision f16,bf16 --no-ceilings --out $R/fa.json > /dev/null 2>&1; el "bench fa rc=\$?"
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 ${1:-100}); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
