#!/usr/bin/env bash
# Issue 46, D128 causal S 1k (16-bit): every registered Hopper tile beside the shipped portable
# pick and the peers, same run; and S 2k, where the Hopper tile takes over.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O/logs"; R=.device/r4; L=$O/logs
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$L/gpu.txt"
mkdir -p /tmp/bin && gunzip -c $R/sdpa-lab.gz > /tmp/bin/sdpa-lab && chmod +x /tmp/bin/sdpa-lab
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $R/peers/*.whl > "$L/pip.log" 2>&1
export PYTHONPATH=/tmp/site SDPA_CACHE_DIR=/tmp/kc
V=""
for k in hopper.m128.n128.w12.s2.b1.w4ex hopper.m128.n128.w12.s2.b1.w4oex hopper.m128.n128.w12.s2.b1.w4ogex hopper.m128.n128.w12.s2.b1.w4pogex hopper.m128.n176.w12.s2.b1.w4ogex hopper.m128.n64.w12.s2.b1.w4ogex hopper.m128.n80.w12.s2.b1.w4ogex portable.m128.n64.w4.s2.b2.cthelx portable.m128.n32.w4.s2.b2.ctelx; do V="$V --variant $k"; done
timeout -s KILL 200 /tmp/bin/sdpa-lab bench --suite fa --quick --precision bf16 --filter d128_s1k_causal --peers --no-ceilings $V --out $L/s1k.json > $L/s1k.log 2>&1; echo "s1k rc=$?"
timeout -s KILL 120 /tmp/bin/sdpa-lab bench --suite fa --precision bf16 --filter d128_s2k_causal --no-ceilings $V --out $L/s2k.json > $L/s2k.log 2>&1; echo "s2k rc=$?"
cd $O && tar czf logs.tgz logs
python3 - $L <<'PY'
import json, sys
for f in ("s1k", "s2k"):
    try: rows = json.load(open(f"{sys.argv[1]}/{f}.json"))["rows"]
    except Exception as e: print(f, e); continue
    for r in sorted(rows, key=lambda r: -(r.get("tflops") or 0)):
        print(f"{r['case']:18s} {r['implementation'] + ':' + str(r.get('variant') or r.get('backend') or ''):60s} {r.get('status','')[:30]:30s} {r.get('tflops') or 0:6.0f}")
PY
