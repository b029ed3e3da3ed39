#!/usr/bin/env bash
# Issue 46, lever D landed (one S chain, verify's O bound with the score-truncation term), and
# issue 48's cache writer vectorized; one round:
#   1. verify --quick --filter /fp8/ (every registered full-FP8 spec; D128/D256 Hopper changed);
#   2. memcheck and racecheck of verify --quick on the shipped FP8 D128 Hopper defaults;
#   3. bench --suite fp8 --quick --precision fp8 --peers (ours beside FA3's and cuDNN's FP8);
#   4. scripts/fp8_accuracy.py --quick (identical E4M3 inputs: ours, FA3, cuDNN);
#   5. 16-bit D128: FA3's wider key tiles (n176, n192) verified, then benched beside the
#      shipped n128 and the peers (bf16, fa grid);
#   6. (part b) gpu_cache_write (16-byte and scalar paths) plain and under memcheck, the candle
#      GPU tests, examples/python/cache_write_bench.py (GPU time from CUDA graphs).
# Usage: run1.sh a | b (two device calls, each under the 10-minute limit).
# Build here first: ../shared/device/pack.sh; gzip -9 .device/tests/*; scripts/build-candle-cuda.sh;
# the wheel into .device/py (maturin build --release) beside the peers' wheels (fa3-fwd 0.0.3,
# nvidia-cudnn-frontend 1.28). Carry .device/{bin,tests,py} and .device/candle.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$L/gpu.txt"
export SDPA_CACHE_DIR=/tmp/kc SDPA_LAB_BIN=$D/bin/sdpa-lab
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$D"/${PYDIR:-py}/*.whl > "$L/pip.log" 2>&1
export PYTHONPATH=/tmp/site
LAB=$D/bin/sdpa-lab
if [ "${1:-a}" = a ]; then
timeout -s KILL 240 $LAB verify --quick --filter /fp8/ --json $L/verify-fp8.json > $L/verify-fp8.log 2>&1
say "verify fp8 rc=$? $(grep -E 'passed|failed' $L/verify-fp8.log | tail -1)"
for V in "--variant hopper.m128.n128.w12.s2.b1.w4pogex --filter /fp8/d128/full" "--variant hopper.m128.n128.w12.s2.b1.w4oex --filter /fp8/d128/causal"; do
  n=$(echo $V | cut -d' ' -f2 | tr . _)
  timeout -s KILL 150 compute-sanitizer --tool memcheck --error-exitcode 9 $LAB verify --quick $V --no-codec > $L/memcheck-$n.log 2>&1
  say "memcheck $n rc=$? $(grep 'ERROR SUMMARY' $L/memcheck-$n.log | tail -1)"
  timeout -s KILL 150 compute-sanitizer --tool racecheck --error-exitcode 9 $LAB verify --quick $V --no-codec > $L/racecheck-$n.log 2>&1
  say "racecheck $n rc=$? $(grep 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/racecheck-$n.log | tail -1)"
done
timeout -s KILL 200 $LAB bench --suite fp8 --quick --precision fp8 --peers --out $L/bench-fp8.json > $L/bench-fp8.log 2>&1
say "bench fp8 rc=$?"
timeout -s KILL 120 python3 scripts/fp8_accuracy.py --quick --out $L/acc.json > $L/acc.log 2>&1
say "accuracy rc=$?"
W="--variant hopper.m128.n176.w12.s2.b1.w4pogex --variant hopper.m128.n192.w12.s2.b1.w4pogex"
timeout -s KILL 120 $LAB verify --quick $W --filter 16/d128 --no-codec --json $L/verify-wide.json > $L/verify-wide.log 2>&1
say "verify n176/n192 16-bit d128 rc=$? $(grep -E 'passed|failed' $L/verify-wide.log | tail -1)"
timeout -s KILL 150 $LAB bench --suite fa --quick --precision bf16 --filter d128 --variant hopper.m128.n128.w12.s2.b1.w4pogex $W --peers --no-ceilings --out $L/bench-wide.json > $L/bench-wide.log 2>&1
say "bench wide tiles rc=$?"
else
mkdir -p /tmp/t && gunzip -c "$D/tests/gpu_cache_write-test.gz" > /tmp/t/gpu_cache_write && chmod +x /tmp/t/gpu_cache_write
timeout 120 /tmp/t/gpu_cache_write --include-ignored > "$L/cache_write.log" 2>&1
say "gpu_cache_write rc=$? $(grep '^test result' "$L/cache_write.log")"
timeout 180 compute-sanitizer --tool memcheck --error-exitcode 1 /tmp/t/gpu_cache_write --include-ignored --test-threads 1 > "$L/cache_write-memcheck.log" 2>&1
say "gpu_cache_write memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$L/cache_write-memcheck.log" | tail -1)"
mkdir -p /tmp/candle && tar -xJf "$D/candle.tar.xz" -C /tmp/candle
TORCH_LIB=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))')
LD_LIBRARY_PATH=$TORCH_LIB:${LD_LIBRARY_PATH:-} timeout 240 /tmp/candle/test-gpu --include-ignored --test-threads 2 > "$L/candle-gpu.log" 2>&1
say "candle gpu rc=$? $(grep '^test result' "$L/candle-gpu.log")"
timeout 200 python3 examples/python/cache_write_bench.py > "$L/cache-bench.log" 2>&1
say "cache write bench rc=$?"
fi
tar czf "$O/logs.tgz" -C /tmp logs
grep -E '^---- |panicked|FAIL' "$L"/verify-fp8.log "$L"/candle-gpu.log "$L"/cache_write.log | head -12
python3 - "$L" <<'PY'
import json, sys
L = sys.argv[1]
try:
    rows = json.load(open(f"{L}/bench-fp8.json"))["rows"]
except Exception as e:
    rows = []; print("no bench json:", e)
T = {}
for r in rows:
    if r.get("status") != "ok" or r.get("precision") != "fp8": continue
    T.setdefault(r["case"], {})[r["implementation"]] = r["tflops"]
print("case ours cudnn fa3 ours/best")
for c, v in sorted(T.items()):
    o = v.get("fp8-sdpa", 0); b = max(v.get("cudnn_fp8", 0), v.get("fa3", 0)) or 1
    print(f"{c:18s} {o:5.0f} {v.get('cudnn_fp8', 0):5.0f} {v.get('fa3', 0):5.0f} {o / b:5.3f}")
PY
[ -f "$L/bench-wide.json" ] && python3 - "$L" <<'PY'
import json, sys
rows = json.load(open(f"{sys.argv[1]}/bench-wide.json"))["rows"]
T = {}
for r in rows:
    if r.get("status") != "ok": continue
    b = r["backend"]
    k = b.split(".")[2] if b.startswith("hopper") else f"{r['implementation']}:{b}"
    T.setdefault(r["case"], {})[k] = r["tflops"]
for c, v in sorted(T.items()):
    print(c, " ".join(f"{k}={x:.0f}" for k, x in sorted(v.items())))
PY
[ -f "$L/cache-bench.log" ] && tail -15 "$L/cache-bench.log"
cat "$L/summary.txt"
