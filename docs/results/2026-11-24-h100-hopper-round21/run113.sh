#!/bin/bash
# Round 21, run 113: intra-warpgroup overlap and ping-pong (hopper.cu step c). Verify every
# registered hopper spec (quick, 3 seeds), memcheck and racecheck on the ping-pong tile at a
# small ragged causal case, then the fa grid (quick) with the hopper tiles and the peers.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
R=docs/results/2026-11-24-h100-hopper-round21
mkdir -p artifacts/cache $OUT
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
timeout 200 sdpa-lab verify --filter hopper --quick --no-codec --json $OUT/verify_quick.json > $OUT/verify_quick.log 2>&1; el "verify quick rc=$?"
grep -iE "fail|error|verify:" $OUT/verify_quick.log | head -20
for S in hopper.m128.n128.w12.s2.b1.w4ogex/f16/d64/causal hopper.m128.n128.w12.s2.b1.w4pogex/bf16/d64/full; do
timeout 100 compute-sanitizer --tool memcheck sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/m.json > $OUT/memcheck.log 2>&1; el "memcheck $S rc=$?"
tail -2 $OUT/memcheck.log
timeout 120 compute-sanitizer --tool racecheck sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/r.json > $OUT/racecheck.log 2>&1; el "racecheck $S rc=$?"
tail -2 $OUT/racecheck.log
done
V="--variant hopper.m128.n128.w12.s2.b1.w4oex --variant hopper.m128.n128.w12.s2.b1.w4ogex --variant hopper.m128.n176.w12.s2.b1.w4ogex --variant hopper.m128.n64.w12.s2.b1.w4ogex --variant hopper.m128.n128.w12.s2.b1.w4pogex"
timeout 300 sdpa-lab bench --suite fa --quick $V --peers --no-ceilings --out $OUT/bench_hopper.json > $OUT/bench_hopper.log 2>&1; el "bench rc=$?"
python3 $R/table.py $OUT/bench_hopper.json
