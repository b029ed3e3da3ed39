#!/bin/bash
# Round 22, run 117: causal tile order in L2-sized sections of (batch, head) pairs (hopper.cu's
# Scheduler) and the step (e) defaults (D64 192-row tile from S 2k, D256 80-key tile).
# Verify every hopper spec, racecheck the new causal defaults; A/B of the causal order on
# the same variants with the previous binary (sdpa-lab-old, HEAD before the change) in the
# same run; then the fa grid (quick) with the shipped defaults and the peers (PyTorch's
# three backends and FlashAttention-3, bf16 only in its wheel).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
timeout 120 sdpa-lab verify --filter hopper --quick --no-codec --json /tmp/v.json > $OUT/verify.log 2>&1; el "verify hopper rc=$?"
grep -E "verify:" $OUT/verify.log
for S in hopper.m192.n128.w16.s2.b1.w4poex/f16/d64/causal hopper.m128.n128.w12.s2.b1.w4oex/f16/d128/causal; do
  timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/s.json > /tmp/rc.log 2>&1; el "racecheck $S rc=$?"
  grep -E "RACECHECK SUMMARY" /tmp/rc.log
done
for bin in sdpa-lab-old sdpa-lab; do
  for c in "d64_s4k_causal hopper.m192.n128.w16.s2.b1.w4poex" "d128_s4k_causal hopper.m128.n128.w12.s2.b1.w4oex" "d256_s4k_causal hopper.m128.n80.w12.s2.b1.w4ogex"; do
    set -- $c
    timeout 40 $bin bench --suite fa --quick --filter $1 --precision f16 --variant $2 --no-ceilings --out $OUT/ab_${bin}_$1.json > /tmp/ab.log 2>&1; el "ab $bin $1 rc=$?"
  done
done
timeout 330 sdpa-lab bench --suite fa --quick --peers --no-ceilings --out $OUT/bench_fa.json > $OUT/bench_fa.log 2>&1; el "bench fa + peers rc=$?"
python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/ab_*.json
python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/bench_fa.json
