#!/bin/bash
# Round 26, run 143 (one GPU): issue 28's FP8 peers in the same run as our full FP8 (FA3's FP8
# forward from the fa3-fwd wheel, cuDNN's FP8 SDPA through the cudnn frontend 1.28 wheel), an
# ncu profile of full FP8 at D128 S 4k, and issue 29's bucket tunes (Hopper fp16 D128 `long`,
# decode FP8-KV `large-contiguous`).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fa3*.whl .whl/cudnn/*.whl || exit 1
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache PYTHONPATH=/tmp/site
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python3 -c "import torch, cudnn; torch.backends.cudnn.version(); print(cudnn.__version__, cudnn.backend_version(), torch.backends.cudnn.version())" 2>&1 | tail -1
timeout -s KILL 200 sdpa-lab bench --suite fp8 --quick --precision fp8 --peers --out $OUT/fp8peers.json > $OUT/fp8peers.log 2>&1; el "bench fp8 peers rc=$?"
python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/fp8peers.json
python3 - $OUT/fp8peers.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))['rows']:
    c = r.get('correctness') or {}
    if r['implementation'] != 'torch' or r['status'] != 'ok':
        print(f"{r['case']:16s} {r['implementation'][:10]:10s} {r['backend'][:24]:24s} {r['status'][:60]:60s} rel_l2={c.get('rel_l2')} {str(r.get('detail',''))[:120]}")
PY
timeout -s KILL 120 sdpa-lab profile --suite fp8 --precision fp8 --filter d128_s4k --out $OUT/prof > $OUT/prof.log 2>&1; el "profile fp8 rc=$?"
sed -n 1,25p $OUT/prof/profile.md
timeout -s KILL 170 sdpa-lab tune --family hopper --precision f16 --head-dim 128 --bucket long --budget 12 --time 140 --cache $OUT/hop_long.jsonl --out $OUT/hop_long > $OUT/hop_long.log 2>&1; el "tune hopper long rc=$?"
tail -5 $OUT/hop_long.log; cat $OUT/hop_long/tuned.json
timeout -s KILL 130 sdpa-lab tune --family decode --shape-class decode --precision fp8kv_f16 --bucket large-contiguous --budget 12 --time 100 --cache $OUT/dec_lc.jsonl --out $OUT/dec_lc > $OUT/dec_lc.log 2>&1; el "tune decode large-contiguous rc=$?"
tail -5 $OUT/dec_lc.log; cat $OUT/dec_lc/tuned.json
rm -rf $OUT/prof/profile
