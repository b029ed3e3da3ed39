#!/usr/bin/env bash
# Issue 47, GPU round 7: the order effect. Python (lab_vs_python.py on round 5's shapes),
# then `sdpa-lab bench`, then Python again, then bench again, back to back on one GPU, with
# the SM clock, power and temperature sampled every 100 ms.
set -uo pipefail
O=${OUT:-/tmp/out}; D=$PWD/.device
python3 -m pip install --no-index --no-deps --target /tmp/site "$D"/py/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site SDPA_CACHE_DIR=/tmp/kc
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > "$O/clocks.csv" 2>&1 &
smi=$!
b() { timeout 100 "$D/bin/sdpa-lab" bench --suite fa --quick --precision bf16 --filter d128 --no-ceilings --out "$O/bench$1.json" > "$O/bench$1.log" 2>&1; echo "bench $1 rc=$? $(date +%T)"; }
p() { timeout 100 python3 examples/python/lab_vs_python.py "$2" > "$O/python$1.txt" 2>&1; echo "python $1 rc=$? $(date +%T)"; }
p 1 "$D/prev/bench.json"; b 1; p 2 "$O/bench1.json"; b 2
kill $smi
python3 - "$O" <<'PY'
import json, sys, re
o = sys.argv[1]
lab = {}
for i in (1, 2):
    for r in json.load(open(f"{o}/bench{i}.json"))["rows"]:
        lab.setdefault(r["case"], []).append(r["stats"]["median_us"])
py = {}
for i in (1, 2):
    for line in open(f"{o}/python{i}.txt"):
        m = re.match(r"\| (d\S+) \| bf16 \| [\d.]+ \| ([\d.]+) \|", line)
        if m: py.setdefault(m.group(1), []).append(float(m.group(2)))
print("| case | Python 1st | lab 1st | Python 2nd | lab 2nd |\n|---|---|---|---|---|")
for c in lab:
    a, b = py.get(c, [0, 0]), lab[c]
    print(f"| {c} | {a[0]:.1f} | {b[0]:.1f} | {a[1] if len(a) > 1 else 0:.1f} | {b[1] if len(b) > 1 else 0:.1f} |")
PY
