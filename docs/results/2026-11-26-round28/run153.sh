#!/bin/bash
# Round 28, run 153 (one GPU): issue 28, full FP8 on the Hopper family with fewer instructions
# per key block: the producer's V transpose with per-lane address bases (51 -> ~17 SASS
# instructions per 32x16 unit) and the overlapped consumer's O update as one FFMA (the alpha
# of OB's own block kept a turn). Verify every Hopper tile (the shared edge mask changed too),
# the base build (a7b5d95) on the D128 FP8 causal case run 150 failed, sanitizers on the
# changed FP8 tiles, then the fp8 suite with cuDNN's FP8 (new) and the base build's fp8 and
# fa rows in the same run. Detached in /tmp/r153; polled.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/cudnn/*.whl || exit 1
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache PYTHONPATH=/tmp/site
mkdir -p artifacts/cache /tmp/r153
R=/tmp/r153
PO=hopper.m128.n128.w12.s2.b1.w4pogex; O=hopper.m128.n128.w12.s2.b1.w4oex; P=hopper.m128.n64.w12.s3.b1.w4pgex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 330 sdpa-lab verify --filter hopper --quick --seeds 2 --no-codec --json $R/verify.json > $R/verify.log 2>&1; el "verify hopper rc=\$?"
grep "verify:" $R/verify.log >> $R/log
grep -iE "fail" $R/verify.log | head -12 >> $R/log
timeout -s KILL 120 .device/base/sdpa-lab verify --filter $PO/fp8/d128/causal --quick --seeds 2 --no-codec --json $R/vbase.json > $R/vbase.log 2>&1; el "base verify PO fp8 d128 causal rc=\$?"
grep "verify:" $R/vbase.log >> $R/log
grep -iE "fail" $R/vbase.log | head -6 >> $R/log
for S in $PO/fp8/d128/full:memcheck $PO/fp8/d128/full:racecheck $O/fp8/d128/causal:racecheck $PO/fp8/d64/full:racecheck $P/fp8/d256/full:racecheck; do
  tool=\${S#*:}; spec=\${S%:*}
  timeout -s KILL 150 compute-sanitizer --tool \$tool --error-exitcode 9 sdpa-lab verify --filter \$spec --quick --seeds 1 --no-codec --json $R/s.json > $R/san.log 2>&1; el "\$tool \$spec rc=\$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
done
touch $R/checks.done
timeout -s KILL 280 sdpa-lab bench --suite fp8 --quick --precision fp8 --peers --out $R/fp8peers.json > $R/fp8peers.log 2>&1; el "bench fp8 peers rc=\$?"
timeout -s KILL 150 .device/base/sdpa-lab bench --suite fp8 --quick --precision fp8 --no-ceilings --out $R/fp8base.json > $R/fp8base.log 2>&1; el "bench fp8 base rc=\$?"
for pass in 1 2; do
  timeout -s KILL 100 .device/base/sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $R/base\$pass.json > /dev/null 2>&1; el "bench fa base pass \$pass rc=\$?"
  timeout -s KILL 100 sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $R/new\$pass.json > /dev/null 2>&1; el "bench fa new pass \$pass rc=\$?"
done
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 112); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
