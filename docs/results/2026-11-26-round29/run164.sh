#!/bin/bash
# Round 29, run 164 (one GPU): issue 28 item 2, FP8-KV prefill on the Hopper family with the
# decode order K(0), then K(u + 1) and V(u) (run 163's ncu: the consumers waited on K_FULL for
# 14.5 % of their samples while the decoders waited on V_EMPTY: K(u + 1) was queued behind V(u)).
# Verify and sanitizers on the three tiles; the full fp8 suite's FP8-KV rows with the persistent
# ping-pong tile and the shipped portable default, beside the fa suite's 16-bit Hopper defaults,
# one pass; ncu of the D128 S 4k tile. Detached in /tmp/r164; polled.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache /tmp/r164
R=/tmp/r164
PO=hopper.m128.n128.w12.s2.b1.w4pogex; G=hopper.m128.n128.w12.s2.b1.w4ogex; O=hopper.m128.n128.w12.s2.b1.w4oex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 240 sdpa-lab verify --variant $PO --variant $G --variant $O --filter fp8kv --quick --seeds 2 --no-codec --json $R/v.json > $R/v.log 2>&1; el "verify fp8kv hopper rc=\$?"
grep "verify:" $R/v.log | tail -1 >> $R/log; grep -iE "fail" $R/v.log | grep -v "^spec" | head -8 >> $R/log
for S in $PO/fp8kv_f16/d128/full:memcheck $PO/fp8kv_f16/d128/full:racecheck $O/fp8kv_bf16/d64/causal:racecheck $G/fp8kv_f16/d64/full:memcheck; do
  tool=\${S#*:}; spec=\${S%:*}
  timeout -s KILL 150 compute-sanitizer --tool \$tool --error-exitcode 9 sdpa-lab verify --filter \$spec --quick --seeds 1 --no-codec --json /tmp/s.json > $R/san.log 2>&1; el "\$tool \$spec rc=\$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
done
touch $R/checks.done
for pass in 1; do
  timeout -s KILL 200 sdpa-lab bench --suite fa --precision f16,bf16 --no-ceilings --out $R/fa\$pass.json > /dev/null 2>&1; el "bench fa 16-bit pass \$pass rc=\$?"
  timeout -s KILL 200 sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --variant $PO --no-ceilings --out $R/kv\$pass.json > /dev/null 2>&1; el "bench fp8kv $PO pass \$pass rc=\$?"
  timeout -s KILL 200 sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --no-ceilings --out $R/kvdef\$pass.json > /dev/null 2>&1; el "bench fp8kv default pass \$pass rc=\$?"
done
N="ncu --clock-control none --cache-control none"
timeout -s KILL 150 \$N -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters -o $R/kv3 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16 --filter d128_s4k --variant $PO --no-ceilings --out /tmp/x.json > $R/ncu_kv3.log 2>&1; el "ncu kv3 rc=\$?"
for f in kv3; do ncu --import $R/\$f.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $R/\${f}_sass.csv.gz; ncu --import $R/\$f.ncu-rep --page details --csv > $R/\$f.csv 2>/dev/null; done
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 ${1:-100}); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
