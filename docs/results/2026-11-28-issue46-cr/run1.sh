#!/usr/bin/env bash
# Issue 46, lever 3 (conditional rescaling, FlashAttention-4's idea in its exact form): the
# 16-bit policy skips O *= alpha where no row of the warp has a new maximum
# (cond-rescale.patch). Same run: verify of the patched binary on the shipped 16-bit Hopper
# tiles, then bench --suite fa --quick (f16, bf16) of the shipped binary (with the peers) and
# the patched one. Also issue 48's writer with the Markstein division: gpu_cache_write plain
# and under memcheck, examples/python/cache_write_bench.py.
# Build here: the shipped sdpa-lab and the patched one (.device/bin/sdpa-lab, sdpa-lab-cr),
# the gpu_cache_write test executable (gzip), the wheel into .device/py.
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs3; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$L/gpu.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site3 "$D"/py/*.whl > "$L/pip.log" 2>&1
export PYTHONPATH=/tmp/site3
for v in hopper.m128.n128.w12.s2.b1.w4pogex hopper.m128.n128.w12.s2.b1.w4oex hopper.m192.n128.w16.s2.b1.w4poex hopper.m128.n80.w12.s2.b1.w4ogex hopper.m128.n192.w12.s2.b1.w4pogex; do
  SDPA_CACHE_DIR=/tmp/kc-cr timeout -s KILL 100 $D/bin/sdpa-lab-cr verify --quick --variant $v --filter 16/ --no-codec > $L/verify-cr-$v.log 2>&1
  say "verify cr $v rc=$? $(grep -E 'passed|failed' $L/verify-cr-$v.log | tail -1)"
done
SDPA_CACHE_DIR=/tmp/kc timeout -s KILL 200 $D/bin/sdpa-lab bench --suite fa --quick --precision f16,bf16 --peers --out $L/A.json > $L/bench-A.log 2>&1
say "bench shipped+peers rc=$?"
SDPA_CACHE_DIR=/tmp/kc-cr timeout -s KILL 150 $D/bin/sdpa-lab-cr bench --suite fa --quick --precision f16,bf16 --no-ceilings --out $L/CR.json > $L/bench-CR.log 2>&1
say "bench cond-rescale rc=$?"
mkdir -p /tmp/t3 && gunzip -c "$D/tests/gpu_cache_write.gz" > /tmp/t3/gpu_cache_write && chmod +x /tmp/t3/gpu_cache_write
timeout 120 /tmp/t3/gpu_cache_write --include-ignored > "$L/cache_write.log" 2>&1
say "gpu_cache_write rc=$? $(grep '^test result' "$L/cache_write.log")"
timeout 180 compute-sanitizer --tool memcheck --error-exitcode 1 /tmp/t3/gpu_cache_write --include-ignored --test-threads 1 > "$L/cache_write-memcheck.log" 2>&1
say "gpu_cache_write memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$L/cache_write-memcheck.log" | tail -1)"
timeout 200 python3 examples/python/cache_write_bench.py > "$L/cache-bench.log" 2>&1
say "cache write bench rc=$?"
tar czf "$O/logs.tgz" -C /tmp logs3
python3 - "$L" <<'PY'
import json, sys
L = sys.argv[1]
T = {}
for tag in ("A", "CR"):
    try: rows = json.load(open(f"{L}/{tag}.json"))["rows"]
    except Exception as e: print(tag, "no json", e); continue
    for r in rows:
        if r.get("status") != "ok": continue
        k = tag if r["implementation"] == "fp8-sdpa" else r["backend"]
        T.setdefault((r["precision"], r["case"]), {})[k] = r["tflops"]
print("precision case shipped cond-rescale CR/A fa3")
for (p, c), v in sorted(T.items()):
    a, cr = v.get("A", 0), v.get("CR", 0)
    print(f"{p:5s} {c:18s} {a:5.0f} {cr:5.0f} {cr / a if a else 0:6.3f} {v.get('fa3', 0):5.0f}")
PY
tail -16 "$L/cache-bench.log"
cat "$L/summary.txt"
