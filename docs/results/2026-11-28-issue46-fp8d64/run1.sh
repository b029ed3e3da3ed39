#!/usr/bin/env bash
# Issue 46, lever 2 for full FP8 at D64: FA3 runs 192-row tiles there (192 x 160); ours are
# 128 x 128. Two 192-row tiles that compile without spills (three consumer warpgroups at 160
# registers: O 32 + OB 32 + S + P fit): m192.n128 persistent without overlap, m192.n64
# persistent with overlap. verify --quick of both, then bench --suite fp8 --quick --precision
# fp8 --filter d64 of the shipped tile and both, with the peers, same run.
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs4; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$L/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site4 "$D"/py/*.whl > "$L/pip.log" 2>&1
export PYTHONPATH=/tmp/site4 SDPA_CACHE_DIR=/tmp/kc4
W="--variant hopper.m192.n128.w16.s2.b1.w4pex --variant hopper.m192.n64.w16.s3.b1.w4poex"
timeout -s KILL 150 $D/bin/sdpa-lab verify --quick $W --filter /fp8/d64 --no-codec > $L/verify.log 2>&1
say "verify rc=$? $(grep -E 'passed|failed' $L/verify.log | tail -1)"
timeout -s KILL 240 $D/bin/sdpa-lab bench --suite fp8 --quick --precision fp8 --filter d64 --variant hopper.m128.n128.w12.s2.b1.w4pogex $W --peers --no-ceilings --out $L/bench.json > $L/bench.log 2>&1
say "bench rc=$?"
tar czf "$O/logs.tgz" -C /tmp logs4
python3 - "$L" <<'PY'
import json, sys
rows = json.load(open(f"{sys.argv[1]}/bench.json"))["rows"]
T = {}
for r in rows:
    if r.get("status") != "ok": continue
    b = r["backend"]
    k = ".".join(b.split(".")[1:3]) + "." + b.split(".")[-1] if b.startswith("hopper") else b
    T.setdefault(r["case"], {})[k] = r["tflops"]
for c, v in sorted(T.items()):
    print(c, " ".join(f"{k}={x:.0f}" for k, x in sorted(v.items())))
PY
cat "$L/summary.txt"
