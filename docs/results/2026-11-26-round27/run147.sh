#!/bin/bash
# Round 27, run 147 (one GPU): issue 28, full FP8 at D256 on the Hopper family (P.V in column
# halves, ping-pong without overlap; persistent = new default, and non-persistent). Verify every
# Hopper FP8 tile on its FP8 classes (the sequential consumer's O update changed for all of them),
# sanitizers on the D256 tile, then the fp8 suite with cuDNN's and FA3's FP8 in the same run, and
# the non-persistent D256 tile on the D256 rows. Detached in /tmp/r147 (stage log /tmp/r147/log).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fa3*.whl .whl/cudnn/*.whl || exit 1
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache PYTHONPATH=/tmp/site
mkdir -p artifacts/cache /tmp/r147
R=/tmp/r147
P=hopper.m128.n128.w12.s2.b1.w4pgex; N=hopper.m128.n128.w12.s2.b1.w4gex
PO=hopper.m128.n128.w12.s2.b1.w4pogex; O=hopper.m128.n128.w12.s2.b1.w4oex; G=hopper.m128.n128.w12.s2.b1.w4ogex
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
timeout -s KILL 400 sdpa-lab verify --variant $P --variant $N --variant $PO --variant $O --variant $G --filter /fp8/ --seeds 2 --no-codec --json $R/verify.json > $R/verify.log 2>&1; el "verify rc=\$?"
grep "verify:" $R/verify.log >> $R/log
grep -i "fail" $R/verify.log | head -20 >> $R/log
for S in $P/fp8/d256/full $P/fp8/d256/causal; do
  for tool in memcheck racecheck; do
    timeout -s KILL 200 compute-sanitizer --tool \$tool --error-exitcode 9 sdpa-lab verify --filter \$S --quick --seeds 1 --no-codec --json $R/s.json > $R/san.log 2>&1; el "\$tool \$S rc=\$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" $R/san.log | tail -2 >> $R/log
  done
done
touch $R/checks.done
timeout -s KILL 260 sdpa-lab bench --suite fp8 --quick --precision fp8 --peers --out $R/fp8peers.json > $R/fp8peers.log 2>&1; el "bench fp8 peers rc=\$?"
timeout -s KILL 120 sdpa-lab bench --suite fp8 --quick --precision fp8 --filter d256 --no-ceilings --variant $N --variant $P --out $R/d256.json > $R/d256.log 2>&1; el "bench d256 tiles rc=\$?"
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 110); do [ -e $R/checks.done ] && break; sleep 5; done
cat $R/log
