#!/usr/bin/env bash
# Issue 47, GPU round 3: the Python package next to the machine's torch and FA3. The kernel
# cache is filled first by `sdpa-lab check` (parallel compiles); then, side by side,
# FlashAttention's own forward tests (python/fa_compat/run_fa_tests.py over
# flash-attention's tests/test_flash_attn.py, carried) and python/tests_gpu; then the decoding
# loop against FA3, and the GPU time through Python against `sdpa-lab bench` on the fa grid.
# From the repo root with .device/{bin,py,fa} carried.
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
python3 -m pip install --no-index --no-deps --target /tmp/site "$D"/py/*.whl > "$L/pip.log" 2>&1
say "pip rc=$?"
export PYTHONPATH=/tmp/site SDPA_CACHE_DIR=/tmp/kc-py SDPA_LAB_BIN=$D/bin/sdpa-lab
python3 -c "import torch, fp8_sdpa, fa3_fwd_interface; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tee -a "$L/summary.txt"
timeout 200 "$D/bin/sdpa-lab" check --arch sm_90a --summary > "$L/check.log" 2>&1
say "check rc=$? $(tail -1 "$L/check.log")"
timeout -s INT 330 python3 python/fa_compat/run_fa_tests.py "$D/fa/test_flash_attn.py" --workdir /tmp/fa > "$L/fa-tests.log" 2>&1 &
fa=$!
timeout 200 python3 -m pytest -q -p no:cacheprovider python/tests_gpu > "$L/tests_gpu.log" 2>&1
say "tests_gpu rc=$? $(tail -1 "$L/tests_gpu.log")"
wait $fa
say "fa tests rc=$?"
timeout 120 python3 examples/python/decode_loop.py --steps 32 --layers 16 > "$L/decode_loop.log" 2>&1
say "decode_loop rc=$?"
timeout 150 "$D/bin/sdpa-lab" bench --suite fa --quick --precision bf16 --filter d128 --no-ceilings --out "$L/bench.json" > "$L/bench.log" 2>&1
say "bench rc=$?"
timeout 90 python3 examples/python/lab_vs_python.py "$L/bench.json" > "$L/lab_vs_python.log" 2>&1
say "lab_vs_python rc=$?"
cp /tmp/fa/junit.xml "$L/fa-junit.xml" 2>/dev/null
tar czf "$O/logs.tgz" -C /tmp logs
grep -E '^FAILED|^ERROR' "$L/tests_gpu.log" | head -5
grep -E '^FAILED' "$L/fa-tests.log" | head -8
sed -n '/^| FlashAttention test/,$p' "$L/fa-tests.log"
tail -8 "$L/decode_loop.log"; cat "$L/lab_vs_python.log"
