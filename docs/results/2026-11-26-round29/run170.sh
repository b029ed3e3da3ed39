#!/bin/bash
# Round 29, run 170 (one GPU): the shipped split (D128 non-causal FP8-KV decodes two passes at a
# time at 56 producer registers, causal four at 64; SASS identical to runs 167/169's builds per
# class): verify every Hopper FP8-KV tile on every class, racecheck and memcheck on the D128
# non-causal persistent tile.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
PO=hopper.m128.n128.w12.s2.b1.w4pogex; G=hopper.m128.n128.w12.s2.b1.w4ogex; O=hopper.m128.n128.w12.s2.b1.w4oex
timeout -s KILL 200 sdpa-lab verify --variant $PO --variant $G --variant $O --filter fp8kv_ --quick --seeds 2 --no-codec --json /tmp/v.json > /tmp/v.log 2>&1; el "verify rc=$?"
grep "verify:" /tmp/v.log | tail -1; grep -iE "fail" /tmp/v.log | grep -v "^spec" | head -4
for t in racecheck memcheck; do
  timeout -s KILL 120 compute-sanitizer --tool $t --error-exitcode 9 sdpa-lab verify --filter $PO/fp8kv_bf16/d128/full --quick --seeds 1 --no-codec --json /tmp/s.json > /tmp/s.log 2>&1; el "$t rc=$?"
  grep -E "SUMMARY|verify:" /tmp/s.log | tail -2
done
