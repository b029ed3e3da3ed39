#!/bin/bash
# Round 29, run 163 (one GPU): issue 28 item 2, FP8-KV prefill on the Hopper family, third
# design: the whole producer warpgroup decodes E4M3 K/V into the 16-bit tiles, each thread at a
# fixed chunk column with per-thread address bases (run 161's ncu of round 26's design: its
# decoders executed more instructions than the consumers, ~60 per 16-code chunk, and the
# consumers waited on the decoded tiles). Verify and sanitizers on the three tiles, then the
# fp8 suite's FP8-KV rows (shipped portable default, and each Hopper tile) beside the fa
# suite's 16-bit Hopper defaults in the same run; ncu of the D128 S 4k tile and of the mission
# shape (issue 27: where the 64-row tile's warps wait). Detached in /tmp/r163; polled.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache /tmp/r163
R=/tmp/r163
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
timeout -s KILL 150 sdpa-lab bench --suite fa --quick --precision f16,bf16 --no-ceilings --out $R/fa.json > /dev/null 2>&1; el "bench fa 16-bit rc=\$?"
timeout -s KILL 150 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16,fp8kv_bf16 --no-ceilings --out $R/kvdef.json > /dev/null 2>&1; el "bench fp8kv default rc=\$?"
for V in $PO $G $O; do
  timeout -s KILL 150 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16,fp8kv_bf16 --variant \$V --no-ceilings --out $R/kv_\$V.json > /dev/null 2>&1; el "bench fp8kv \$V rc=\$?"
done
timeout -s KILL 150 sdpa-lab bench --suite fa --quick --precision f16,bf16 --no-ceilings --out $R/fa2.json > /dev/null 2>&1; el "bench fa 16-bit pass 2 rc=\$?"
N="ncu --clock-control none --cache-control none"
timeout -s KILL 150 \$N -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters -o $R/kv3 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16 --filter d128_s4k --variant $PO --no-ceilings --out /tmp/x.json > $R/ncu_kv3.log 2>&1; el "ncu kv3 rc=\$?"
timeout -s KILL 120 \$N -k regex:sdpa_hopper --launch-skip 150 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters -o $R/mis sdpa-lab bench --suite mission --filter mission --precision f16 --mode hot --no-ceilings --out /tmp/x.json > $R/ncu_mis.log 2>&1; el "ncu mission rc=\$?"
for f in kv3 mis; do ncu --import $R/\$f.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $R/\${f}_sass.csv.gz; ncu --import $R/\$f.ncu-rep --page details --csv > $R/\$f.csv 2>/dev/null; done
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 ${1:-100}); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
