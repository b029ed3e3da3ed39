#!/usr/bin/env bash
# Issue 46, lever 1 (accumulation), round 3: one same-run table of careful (A, shipped), one S
# chain with P.V promoted every block (D) and fast accumulation (B) beside FA3's and cuDNN's FP8,
# and the identical-input accuracy of each on 256-tile grids (the Hopper kernel, key recorded).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O/logs"; R=.device/r3; L=$O/logs
T0=$SECONDS; say() { echo "== $* [$((SECONDS - T0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$L/gpu.txt"
mkdir -p /tmp/bin && for x in A B D; do gunzip -c $R/sdpa-lab-$x.gz > /tmp/bin/sdpa-lab-$x; chmod +x /tmp/bin/sdpa-lab-$x; done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $R/peers/*.whl > "$L/pip.log" 2>&1
for x in A B D; do python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site$x $R/wh$x/*.whl >> "$L/pip.log" 2>&1; done
export PYTHONPATH=/tmp/site
SDPA_CACHE_DIR=/tmp/kc-A timeout -s KILL 200 /tmp/bin/sdpa-lab-A bench --suite fp8 --quick --precision fp8 --peers --out $L/A.json > $L/bench-A.log 2>&1; say "bench A+peers rc=$?"
for x in D B; do
  SDPA_CACHE_DIR=/tmp/kc-$x timeout -s KILL 80 /tmp/bin/sdpa-lab-$x bench --suite fp8 --quick --precision fp8 --no-ceilings --out $L/$x.json > $L/bench-$x.log 2>&1; say "bench $x rc=$?"
done
PYTHONPATH=/tmp/siteA:/tmp/site timeout -s KILL 120 python3 scripts/fp8_accuracy.py --quick --out $L/accA.json > $L/accA.log 2>&1; say "accuracy A+peers rc=$?"
for x in D B; do
  PYTHONPATH=/tmp/site$x:/tmp/site timeout -s KILL 80 python3 scripts/fp8_accuracy.py --quick --no-peers --out $L/acc$x.json > $L/acc$x.log 2>&1; say "accuracy $x rc=$?"
done
cd $O && tar czf logs.tgz logs && rm -rf logs/*.log logs/pip.log
python3 - $O <<'PY'
import json, sys, os, tarfile
O = sys.argv[1]
tf = tarfile.open(f"{O}/logs.tgz")
def load(n):
    try: return json.load(tf.extractfile(f"logs/{n}.json"))
    except KeyError: return None
T = {}
for tag in ("A", "D", "B"):
    for r in (load(tag) or {"rows": []})["rows"]:
        if r.get("status") != "ok" or r.get("precision") != "fp8": continue
        k = tag if r["implementation"] == "fp8-sdpa" else r["implementation"]
        T.setdefault(r["case"], {})[k] = (r["tflops"], (r.get("correctness") or {}).get("rel_l2"))
print(f"{'case':20s} {'A':>5s} {'D':>5s} {'B':>5s} {'cudnn':>5s} {'fa3':>5s} {'D/A':>5s} {'B/A':>5s} {'A/pr':>5s} {'D/pr':>5s}  rel_l2 A D B cudnn fa3 (vs unquantized)")
for c, v in sorted(T.items()):
    g = lambda k: v.get(k, (0, None))
    a, d, b, cd, fa = g("A"), g("D"), g("B"), g("cudnn_fp8"), g("fa3")
    pr = max(cd[0], fa[0]) or 1
    f = lambda x: "-" if x is None else f"{x:.4f}"
    print(f"{c:20s} {a[0]:5.0f} {d[0]:5.0f} {b[0]:5.0f} {cd[0]:5.0f} {fa[0]:5.0f} {d[0]/a[0] if a[0] else 0:5.3f} {b[0]/a[0] if a[0] else 0:5.3f} {a[0]/pr:5.3f} {d[0]/pr:5.3f}  {f(a[1])} {f(d[1])} {f(b[1])} {f(cd[1])} {f(fa[1])}")
acc = {x: load(f"acc{x}") for x in "ADB"}
print("identical E4M3 inputs, rel L2 vs float64 on them: A D B fa3 cudnn | A's kernel")
for i, r in enumerate((acc["A"] or {"rows": []})["rows"]):
    e = lambda x: acc[x]["rows"][i]["rel_l2"].get("ours") if acc.get(x) else None
    f = lambda y: f"{y:.4f}" if isinstance(y, float) else "-"
    print(f"d{r['head_dim']:<3d} s{r['seq']:<5d} {'causal' if r['causal'] else 'full':6s} {r['dist']:10s} {f(e('A'))} {f(e('D'))} {f(e('B'))} {f(r['rel_l2'].get('fa3'))} {f(r['rel_l2'].get('cudnn_fp8'))} | {r['kernels'].get('ours')}")
PY
