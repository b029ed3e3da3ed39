#!/bin/bash
# Round 24, run 122: the tuner on the GPU (issue 29).
# 1. The decode family's FP8-KV D128 space (120 valid variants) enumerated exhaustively: the
#    tuner with a budget above the space, then random search over the rest (--resume: each
#    variant measured once, no pruning), all into one result cache.
# 2. Tuner against random search at a budget of 20 (a sixth of the space), seeds 0-5, replayed
#    from that cache (every candidate a cache hit: no GPU time).
# 3. The decode family's fp16 space, budget 30; the Hopper family's fp16 D128 prefill space,
#    budget 40 (the run), each against its hand-picked default.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
D="--family decode --shape-class decode --head-dim 128 --prune 1000"
timeout 220 sdpa-lab tune $D --precision fp8kv_f16 --budget 120 --resume --compare-random --cache $OUT/dec8.jsonl --out $OUT/dec8_all > $OUT/dec8_all.log 2>&1; el "decode fp8kv exhaustive rc=$?"
tail -4 $OUT/dec8_all.log
for s in 0 1 2 3 4 5; do
  timeout 40 sdpa-lab tune $D --precision fp8kv_f16 --budget 20 --seed $s --resume --compare-random --cache $OUT/dec8.jsonl --out $OUT/dec8_b20_s$s > $OUT/dec8_b20_s$s.log 2>&1; el "replay seed $s rc=$?"
done
timeout 100 sdpa-lab tune --family decode --shape-class decode --head-dim 128 --precision f16 --budget 30 --cache $OUT/dec16.jsonl --out $OUT/dec16 > $OUT/dec16.log 2>&1; el "decode f16 rc=$?"
tail -3 $OUT/dec16.log
timeout 200 sdpa-lab tune --family hopper --precision f16 --head-dim 128 --budget 40 --time 170 --cache $OUT/hop.jsonl --out $OUT/hop > $OUT/hop.log 2>&1; el "hopper f16 d128 rc=$?"
tail -3 $OUT/hop.log
python3 docs/results/2026-11-25-h100-round24/tune_table.py $OUT
