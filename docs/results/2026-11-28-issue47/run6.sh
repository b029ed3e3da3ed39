#!/usr/bin/env bash
# Issue 47, GPU round 6: data_dependence.py (is the GPU time of one kernel data-dependent?),
# with the SM clock and power sampled every 100 ms beside it.
set -uo pipefail
O=${OUT:-/tmp/out}; D=$PWD/.device
python3 -m pip install --no-index --no-deps --target /tmp/site "$D"/py/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site SDPA_CACHE_DIR=/tmp/kc
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > "$O/clocks.csv" 2>&1 &
smi=$!
timeout 200 python3 docs/results/2026-11-28-issue47/data_dependence.py 2>&1 | tee "$O/data_dependence.txt"
kill $smi
python3 - "$O/clocks.csv" <<'PY'
import sys, collections
rows = [l.split(", ") for l in open(sys.argv[1]).read().splitlines()[1:] if l.count(",") >= 3]
clk = [int(r[1].split()[0]) for r in rows if r[1].split()[0].isdigit()]
pw = [float(r[2].split()[0]) for r in rows if r[2].split()[0].replace(".", "").isdigit()]
print("SM clock MHz: min", min(clk), "median", sorted(clk)[len(clk)//2], "max", max(clk), "| power W: max", max(pw))
PY
