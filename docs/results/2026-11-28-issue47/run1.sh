#!/usr/bin/env bash
# Issue 47, GPU round 1: the Python package on the GPU machine. Installs the abi3 wheel built
# here (and pytest, carried in .whl/) next to the machine's torch, runs python/tests_gpu, then
# examples/python/decode_loop.py (tokens/s against FA3 where it imports, host time per call).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$O/summary.txt"; }
nvidia-smi -L > "$O/gpu.txt"
python3 -m pip install --no-index --no-deps --target /tmp/py .whl/*.whl > "$O/pip.log" 2>&1
say "pip rc=$?"
export PYTHONPATH=/tmp/py
python3 -c "import torch, fp8_sdpa; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tee -a "$O/summary.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider python/tests_gpu > "$O/pytest-gpu.log" 2>&1
say "pytest tests_gpu rc=$? $(tail -1 "$O/pytest-gpu.log")"
grep -E '^FAILED|^ERROR|Error' "$O/pytest-gpu.log" | head -15
timeout 60 python3 examples/python/decode_loop.py --steps 16 --layers 16 > "$O/decode_loop.log" 2>&1
say "decode_loop rc=$?"
cat "$O/decode_loop.log" | tail -12
