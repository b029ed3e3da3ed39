#!/usr/bin/env bash
# Issue 48, GPU round 1: the paged-cache writer and the
# candle continuous-batching cache on the GPU.
#   1. fp8-sdpa's gpu_cache_write tests, plain and under compute-sanitizer memcheck;
#   2. the candle GPU tests (the two new ones among them) from scripts/build-candle-cuda.sh;
#   3. FlashAttention's kvcache tests through the Python package, appended k/v included;
#   4. python/tests_gpu (reshape_and_cache_flash against torch rows among them);
#   5. examples/python/cache_write_bench.py: the writer against a copy of its bytes.
# Build first, here: ../shared/device/pack.sh (it empties .device/), then
# scripts/build-candle-cuda.sh (adds .device/candle.tar.xz), the wheel into .device/py/
# (maturin build --release), flash-attention's tests/test_flash_attn.py into .device/fa/, and
# einops + pytest wheels into .device/py/. Carry .device/{bin,tests,py,fa} and .device/candle.tar.xz.
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
export SDPA_CACHE_DIR=/tmp/kc SDPA_LAB_BIN=$D/bin/sdpa-lab
mkdir -p /tmp/t && gunzip -c "$D/tests/gpu_cache_write-test.gz" > /tmp/t/gpu_cache_write && chmod +x /tmp/t/gpu_cache_write
timeout 120 /tmp/t/gpu_cache_write --include-ignored > "$L/cache_write.log" 2>&1
say "gpu_cache_write rc=$? $(grep '^test result' "$L/cache_write.log")"
timeout 180 compute-sanitizer --tool memcheck --error-exitcode 1 /tmp/t/gpu_cache_write --include-ignored --test-threads 1 > "$L/cache_write-memcheck.log" 2>&1
say "gpu_cache_write memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$L/cache_write-memcheck.log" | tail -1)"
mkdir -p /tmp/candle && tar -xJf "$D/candle.tar.xz" -C /tmp/candle
TORCH_LIB=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))')
LD_LIBRARY_PATH=$TORCH_LIB:${LD_LIBRARY_PATH:-} timeout 240 /tmp/candle/test-gpu --include-ignored --test-threads 2 > "$L/candle-gpu.log" 2>&1
say "candle gpu rc=$? $(grep '^test result' "$L/candle-gpu.log")"
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$D"/py/*.whl > "$L/pip.log" 2>&1
export PYTHONPATH=/tmp/site
timeout -s INT 300 python3 python/fa_compat/run_fa_tests.py "$D/fa/test_flash_attn.py" --workdir /tmp/fa \
  --tests test_flash_attn_kvcache > "$L/fa-kvcache.log" 2>&1
say "fa kvcache rc=$?"
timeout 300 python3 -m pytest -q -p no:cacheprovider python/tests_gpu > "$L/py-gpu.log" 2>&1
say "python tests_gpu rc=$? $(tail -1 "$L/py-gpu.log")"
timeout 200 python3 examples/python/cache_write_bench.py > "$L/cache-bench.log" 2>&1
say "cache write bench rc=$?"
tar czf "$O/logs.tgz" -C /tmp logs
grep -E '^---- |panicked' "$L"/*.log | head -20
sed -n '/^| FlashAttention test/,$p' "$L/fa-kvcache.log" | head -12
tail -16 "$L/cache-bench.log"
cat "$L/summary.txt"
