#!/usr/bin/env bash
# Issue 47, GPU round 8: `sdpa-lab bench`, then lab_vs_python.py with the lab's own protocol
# (short bursts) and sustained, the SM clock and power sampled every 100 ms.
set -uo pipefail
O=${OUT:-/tmp/out}; D=$PWD/.device
python3 -m pip install --no-index --no-deps --target /tmp/site "$D"/py/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site SDPA_CACHE_DIR=/tmp/kc
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > "$O/clocks.csv" 2>&1 &
smi=$!
timeout 100 "$D/bin/sdpa-lab" bench --suite fa --quick --precision bf16 --filter d128 --no-ceilings --out "$O/bench.json" > "$O/bench.log" 2>&1
echo "bench rc=$?"
timeout 100 python3 examples/python/lab_vs_python.py "$O/bench.json" 2>&1 | tee "$O/lab_vs_python.txt"
kill $smi
