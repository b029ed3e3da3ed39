#!/bin/bash
# Round 26, run 146 (one GPU): issue 27's small-batch decode gap (B1 Skv 4k fp16 at 0.69x
# cuDNN in round 24) through issue 29's tuner: the `small-contiguous` decode bucket (B1 Skv 4k
# and B4 Skv 128k, Hkv 8, Hq 32, D128) for fp16 and FP8-KV.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name --format=csv,noheader
for p in f16 fp8kv_f16; do
  timeout -s KILL 120 sdpa-lab tune --family decode --shape-class decode --precision $p --bucket small-contiguous --budget 12 --time 90 --cache $OUT/sc_$p.jsonl --out $OUT/sc_$p > $OUT/sc_$p.log 2>&1; el "tune decode small-contiguous $p rc=$?"
  tail -2 $OUT/sc_$p.log; python3 -c "import json; d=json.load(open('$OUT/sc_$p/topk.json')); print('evals', d['evaluations'], 'seconds', round(d['seconds'],1), 'default', d['default']); [print(' ', t['variant'], round(t['median_us'],2)) for t in d['topk'][:5]]"
done
