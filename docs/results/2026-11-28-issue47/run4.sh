#!/usr/bin/env bash
# Issue 47, GPU round 4: first, on a quiet GPU, the decoding loop against FA3 in bf16 (the
# fa3-fwd wheel has no fp16) and the GPU time through Python against `sdpa-lab bench` (fa grid,
# D128, bf16; Python warmed 300 ms, three rounds, the kernel recorded); then `verify --quick`
# with NVRTC 13 and with NVRTC 12.6 side by side (one build, driver 13).
# From the repo root with .device/{bin,py,nvrtc12} carried.
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
python3 -m pip install --no-index --no-deps --target /tmp/site "$D"/py/*.whl > "$L/pip.log" 2>&1
mkdir -p /tmp/nv12 && python3 -m zipfile -e "$D"/nvrtc12/*.whl /tmp/nv12
export PYTHONPATH=/tmp/site SDPA_LAB_BIN=$D/bin/sdpa-lab
# Python and the lab share one kernel cache (NVRTC 13), filled in parallel first.
SDPA_CACHE_DIR=/tmp/kc-nvrtc13 timeout 120 "$D/bin/sdpa-lab" check --arch sm_90a --summary > "$L/check13.log" 2>&1 &
SDPA_CACHE_DIR=/tmp/kc-nvrtc12 SDPA_NVRTC_PATH=/tmp/nv12/nvidia/cuda_nvrtc/lib \
  timeout 150 "$D/bin/sdpa-lab" check --arch sm_90a --summary > "$L/check12.log" 2>&1 &
wait
say "checks: $(tail -1 "$L/check13.log" | cut -c1-40) / $(tail -1 "$L/check12.log" | cut -c1-40)"
export SDPA_CACHE_DIR=/tmp/kc-nvrtc13
timeout 120 python3 examples/python/decode_loop.py --steps 32 --layers 16 > "$L/decode_loop.log" 2>&1
say "decode_loop rc=$?"
timeout 150 "$D/bin/sdpa-lab" bench --suite fa --quick --precision bf16 --filter d128 --no-ceilings --out "$L/bench.json" > "$L/bench.log" 2>&1
say "bench rc=$?"
timeout 120 python3 examples/python/lab_vs_python.py "$L/bench.json" > "$L/lab_vs_python.log" 2>&1
say "lab_vs_python rc=$?"
v() {  # name, then VAR=value assignments
  local n=$1; shift
  ( [ $# -gt 0 ] && export "$@"; export SDPA_CACHE_DIR=/tmp/kc-$n
    # Under `script`, a terminal: the progress bar is drawn, so a cut run still says how far it got.
    timeout 420 script -qfec "$D/bin/sdpa-lab verify --quick --json $L/$n-verify.json" /dev/null > "$L/$n-verify.log" 2>&1
    echo "$n verify rc=$? | $(grep -vE '^\s*$' "$L/$n-verify.log" | tail -2 | tr '\r\n' '\n ' | tail -2 | cut -c1-200)" >> "$L/summary.txt" )
}
v nvrtc13 &
v nvrtc12 SDPA_NVRTC_PATH=/tmp/nv12/nvidia/cuda_nvrtc/lib &
wait
say "verify done"
tar czf "$O/logs.tgz" -C /tmp logs
cat "$L/summary.txt"; tail -7 "$L/decode_loop.log"; cat "$L/lab_vs_python.log"
