#!/bin/bash
# Round 30, run 172 (one GPU): issue 27, programmatic dependent launch. The Hopper and decode
# kernels wait (griddepcontrol.wait) before touching memory and launch as programmatic
# dependents (.device/bin), against the shipped build (.device/ship, 3a5c2b3). Checks: verify
# the mission tile and the default decode tile, every GPU test. Timing: the mission suite with
# peers, the hkv8 decode rows, the D128 fa rows, two interleaved passes. Diagnostic for issue 28
# item 2: the 16-bit D128 tile with its consumers at 216 registers, FP8-KV's count
# (.device/r216; PDL too). Detached in /tmp/r172; polled.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
mkdir -p artifacts/cache /tmp/r172
R=/tmp/r172
M=hopper.m64.n128.w8.s2.b1.w4oex; DD=decode.m16.n64.w4.s3.b2.cex; PO=hopper.m128.n128.w12.s2.b1.w4pogex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 60 sdpa-lab verify --filter $M --quick --seeds 1 --no-codec --json /tmp/smoke.json > $R/smoke.log 2>&1; rc=\$?; el "smoke rc=\$rc"
grep "verify:" $R/smoke.log | tail -1 >> $R/log
[ \$rc = 137 ] && { touch $R/checks.done $R/all.done; exit; }
for F in $M $DD; do
  timeout -s KILL 120 sdpa-lab verify --filter \$F --quick --seeds 2 --no-codec --json $R/v.json > $R/v.log 2>&1; el "verify \$F rc=\$?"
  grep "verify:" $R/v.log | tail -1 >> $R/log; grep -iE "fail" $R/v.log | grep -v "^spec" | head -4 >> $R/log
done
for t in .device/tests/*; do
  timeout -s KILL 240 \$t --ignored > $R/t.log 2>&1; rc=\$?
  echo "test \$(basename \$t) rc=\$rc: \$(grep -E '^test result' $R/t.log | tail -1)" >> $R/log
  grep -E "FAILED|panicked" $R/t.log | head -4 >> $R/log
done
el "tests"
touch $R/checks.done
for pass in 1 2; do
  P=""; [ \$pass = 1 ] && P=--peers
  for b in bin ship; do
    timeout -s KILL 150 .device/\$b/sdpa-lab bench --suite mission --precision f16,bf16 \$P --no-ceilings --out $R/mis_\${b}\$pass.json > /dev/null 2>&1; el "mission \$b \$pass rc=\$?"
    timeout -s KILL 100 .device/\$b/sdpa-lab bench --suite decode --precision f16,fp8kv_f16 --filter hkv8 --no-ceilings --out $R/dec_\${b}\$pass.json > /dev/null 2>&1; el "decode \$b \$pass rc=\$?"
  done
  for b in bin ship r216; do
    timeout -s KILL 100 .device/\$b/sdpa-lab bench --suite fa --quick --precision f16 --filter d128 --variant $PO --no-ceilings --out $R/fa_\${b}\$pass.json > /dev/null 2>&1; el "fa \$b \$pass rc=\$?"
  done
done
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 ${1:-100}); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
