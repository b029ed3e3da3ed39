#!/bin/bash
# Round 29, run 166 (one GPU): issue 28 item 2, the FP8-KV decoder with four passes' loads in
# flight (run 163's ncu: each pass's load waited for the previous pass's stores, 8 serial chains
# per tile, and the consumers waited on K_FULL for 14.5 % of their samples); producer at 64
# registers, consumers at 216. Verify and sanitizers on the three tiles, then the fp8 suite's
# FP8-KV rows (quick) on the persistent tile and through dispatch beside the fa suite's 16-bit
# rows, same run; ncu of D128 S 4k. Detached in /tmp/r166; polled.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache /tmp/r166
R=/tmp/r166
PO=hopper.m128.n128.w12.s2.b1.w4pogex; G=hopper.m128.n128.w12.s2.b1.w4ogex; O=hopper.m128.n128.w12.s2.b1.w4oex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 240 sdpa-lab verify --variant $PO --variant $G --variant $O --filter fp8kv --quick --seeds 2 --no-codec --json $R/v.json > $R/v.log 2>&1; el "verify fp8kv hopper rc=\$?"
grep "verify:" $R/v.log | tail -1 >> $R/log; grep -iE "fail" $R/v.log | grep -v "^spec" | head -8 >> $R/log
timeout -s KILL 120 compute-sanitizer --tool memcheck --error-exitcode 9 sdpa-lab verify --filter $PO/fp8kv_f16/d128/full --quick --seeds 1 --no-codec --json /tmp/s.json > $R/san.log 2>&1; el "memcheck rc=\$?"
grep -E "ERROR SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
timeout -s KILL 120 compute-sanitizer --tool racecheck --error-exitcode 9 sdpa-lab verify --filter $PO/fp8kv_bf16/d128/full --quick --seeds 1 --no-codec --json /tmp/s.json > $R/san.log 2>&1; el "racecheck $PO fp8kv_bf16 d128 rc=\$?"
grep -E "RACECHECK SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
touch $R/checks.done
timeout -s KILL 150 sdpa-lab bench --suite fa --quick --precision f16,bf16 --no-ceilings --out $R/fa.json > /dev/null 2>&1; el "bench fa quick rc=\$?"
timeout -s KILL 240 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16,fp8kv_bf16 --variant $PO --no-ceilings --out $R/kv.json > /dev/null 2>&1; el "bench fp8kv $PO rc=\$?"
timeout -s KILL 150 sdpa-lab bench --suite fa --quick --precision f16,bf16 --no-ceilings --out $R/fa2.json > /dev/null 2>&1; el "bench fa quick pass 2 rc=\$?"
timeout -s KILL 150 ncu --clock-control none --cache-control none -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters -o $R/kv4 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16 --filter d128_s4k --variant $PO --no-ceilings --out /tmp/x.json > $R/ncu_kv4.log 2>&1; el "ncu rc=\$?"
ncu --import $R/kv4.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $R/kv4_sass.csv.gz; ncu --import $R/kv4.ncu-rep --page details --csv > $R/kv4.csv 2>/dev/null
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 ${1:-100}); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
