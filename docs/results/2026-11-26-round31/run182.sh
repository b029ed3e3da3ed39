#!/bin/bash
# Round 31, run 182 (one GPU): issue 28's closing table on the landing build (db03f7b): the fp8
# suite (full FP8 and FP8-KV) with every peer in one run (FA3's FP8 forward from the fa3-fwd
# wheel, cuDNN's FP8 SDPA through the cudnn frontend 1.28 wheel, PyTorch's 16-bit backends),
# and the fa suite's f16 rows (our 16-bit Hopper tiles, FP8-KV's target). The binary travels
# gzipped (.ab), so that both wheels fit the 64 MiB the call carries.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fa3*.whl .whl/cudnn/*.whl || exit 1
mkdir -p /tmp/bin && gunzip -c .ab/sdpa-lab.gz > /tmp/bin/sdpa-lab && chmod +x /tmp/bin/sdpa-lab
export PATH=/tmp/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache PYTHONPATH=/tmp/site
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout -s KILL 330 sdpa-lab bench --suite fp8 --quick --precision fp8,fp8kv_f16 --peers --out $OUT/fp8peers.json > $OUT/fp8peers.log 2>&1; el "bench fp8 peers rc=$?"
timeout -s KILL 150 sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $OUT/fa_f16.json > $OUT/fa_f16.log 2>&1; el "bench fa f16 rc=$?"
python3 - $OUT/fp8peers.json $OUT/fa_f16.json <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))['rows'] + json.load(open(sys.argv[2]))['rows']
T = {}
for r in rows:
    if r['status'] != 'ok': continue
    name = r['implementation'] if r['implementation'] != 'torch' else 'torch-' + r['backend']
    T.setdefault((r['case'], r['precision']), {})[name] = (r['tflops'], (r.get('correctness') or {}).get('rel_l2'))
f16 = {c: v['fp8-sdpa'][0] for (c, p), v in T.items() if p == 'f16' and 'fp8-sdpa' in v}
print(f"{'case':18s} {'prec':9s} {'ours':>6s} {'cudnn8':>6s} {'fa3':>6s} {'x cudnn':>7s} {'x fa3':>6s} {'ours16':>6s} {'x16':>5s}  rel_l2 ours / cudnn / fa3")
for (c, p), v in sorted(T.items()):
    if p == 'f16': continue
    o, cd, fa = v.get('fp8-sdpa', (0, None)), v.get('cudnn_fp8', (0, None)), v.get('fa3', (0, None))
    x16 = o[0] / f16[c] if f16.get(c) else 0
    print(f"{c:18s} {p:9s} {o[0]:6.0f} {cd[0]:6.0f} {fa[0]:6.0f} {o[0] / cd[0] if cd[0] else 0:7.3f} {o[0] / fa[0] if fa[0] else 0:6.3f} {f16.get(c, 0):6.0f} {x16:5.2f}  {o[1]} / {cd[1]} / {fa[1]}")
PY
