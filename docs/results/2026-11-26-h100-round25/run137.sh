#!/bin/bash
# Round 25, run 137: issue 28 item 2, FP8-KV prefill on the Hopper family (hopper.cu: E4M3 K/V
# TMA-loaded as codes, decoded to 16 bits by the producer warps into the 16-bit wgmma's
# operand tiles). Verify every hopper spec, sanitizers on two FP8-KV specs, then the fa grid
# (quick, f16 and fp8kv_f16): the shipped defaults (f16: Hopper; FP8-KV: portable) and the
# two Hopper FP8-KV tiles.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
timeout -s KILL 240 sdpa-lab verify --filter hopper --quick --no-codec --json $OUT/verify.json > $OUT/verify.log 2>&1; el "verify hopper rc=$?"
grep "verify:" $OUT/verify.log
python3 docs/results/2026-11-26-h100-round25/vsum.py $OUT/verify.json /fp8kv | grep -v "^\[" | head -12
for S in hopper.m128.n128.w12.s2.b1.w4pogex/fp8kv_f16/d128/full hopper.m128.n128.w12.s2.b1.w4oex/fp8kv_bf16/d64/causal; do
  for tool in memcheck racecheck; do
    timeout -s KILL 100 compute-sanitizer --tool $tool --error-exitcode 9 sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/s.json > /tmp/san.log 2>&1; el "$tool $S rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" /tmp/san.log | tail -2
  done
done
timeout -s KILL 120 sdpa-lab bench --suite fa --quick --precision f16,fp8kv_f16 --no-ceilings --out $OUT/bench_default.json > $OUT/bench_default.log 2>&1; el "bench defaults rc=$?"
timeout -s KILL 120 sdpa-lab bench --suite fa --quick --precision fp8kv_f16 --no-ceilings --variant hopper.m128.n128.w12.s2.b1.w4oex --variant hopper.m128.n128.w12.s2.b1.w4pogex --out $OUT/bench_hopper_fp8kv.json > $OUT/bench_hopper_fp8kv.log 2>&1; el "bench hopper fp8kv rc=$?"
grep -iE "failed" $OUT/bench_hopper_fp8kv.log | head -4
python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/bench_default.json $OUT/bench_hopper_fp8kv.json
