#!/bin/bash
# Round 25, run 128: issue 26 step (d), the TMA-store epilogue (O through shared memory, one
# bulk store per warpgroup, overlapped with the next tile), and the causal skip of key blocks
# wholly above a warpgroup's diagonal (no ping-pong). Verify every hopper spec; memcheck and
# racecheck on a staged-O default, the skipping D64 causal default and the unstaged D256
# one; A/B of the fa grid (f16, quick) for three binaries built here: HEAD (old), step d
# only (stepd), step d + skip (skip = .device's).
export PATH=$PWD/.device/bin:$PWD/.ab:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
timeout 150 sdpa-lab verify --filter hopper --quick --no-codec --json /tmp/v.json > $OUT/verify.log 2>&1; el "verify hopper rc=$?"
grep -E "verify:|FAIL" $OUT/verify.log | tail -5
for S in hopper.m128.n128.w12.s2.b1.w4pogex/f16/d128/full hopper.m192.n128.w16.s2.b1.w4poex/bf16/d64/causal hopper.m128.n80.w12.s2.b1.w4ogex/f16/d256/causal; do
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/s.json > /tmp/san.log 2>&1; el "$tool $S rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" /tmp/san.log | tail -2
  done
done
for bin in sdpa-lab-old sdpa-lab-stepd sdpa-lab; do
  timeout 100 $bin bench --suite fa --quick --precision f16 --no-ceilings --out $OUT/ab_$bin.json > /tmp/ab.log 2>&1; el "ab $bin rc=$?"
done
python3 docs/results/2026-11-26-h100-round25/ab.py $OUT/ab_sdpa-lab-old.json $OUT/ab_sdpa-lab-stepd.json $OUT/ab_sdpa-lab.json
