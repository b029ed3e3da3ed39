#!/bin/bash
# Round 21, run 112: first run of the Hopper family (TMA ring + producer warpgroup + wgmma
# consumers, no ping-pong yet). Verify every registered hopper spec, memcheck and racecheck
# on a small ragged case, then the fa grid (quick) with the two hopper tiles, the shipped
# portable defaults and PyTorch's peers in one run.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
R=docs/results/2026-11-24-h100-hopper-round21
mkdir -p artifacts/cache $OUT
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
timeout 200 sdpa-lab verify --filter hopper --quick --no-codec --json $OUT/verify_quick.json > $OUT/verify_quick.log 2>&1; el "verify quick rc=$?"
grep -iE "fail|error|passed|runs" $OUT/verify_quick.log | head -20
S='hopper.m128.n128.w12.s2.b1.w4ex/f16/d64/causal'
timeout 120 compute-sanitizer --tool memcheck sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/m.json > $OUT/memcheck.log 2>&1; el "memcheck rc=$?"
tail -4 $OUT/memcheck.log
timeout 150 compute-sanitizer --tool racecheck sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/r.json > $OUT/racecheck.log 2>&1; el "racecheck rc=$?"
tail -4 $OUT/racecheck.log
timeout 240 sdpa-lab bench --suite fa --quick --variant hopper.m128.n128.w12.s2.b1.w4ex --variant hopper.m128.n64.w12.s2.b1.w4ex --variant hopper.m128.n128.w12.s2.b1.w4pex --no-ceilings --out $OUT/bench_hopper.json > $OUT/bench_hopper.log 2>&1; el "bench hopper rc=$?"
timeout 200 sdpa-lab bench --suite fa --quick --peers --no-ceilings --out $OUT/bench_default.json > $OUT/bench_default.log 2>&1; el "bench default+peers rc=$?"
tail -3 $OUT/bench_default.log
python3 $R/table.py $OUT/bench_hopper.json $OUT/bench_default.json
