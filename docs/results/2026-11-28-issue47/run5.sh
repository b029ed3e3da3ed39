#!/usr/bin/env bash
# Issue 47, GPU round 5: the GPU time through Python against `sdpa-lab bench` once more, with
# two diagnostics (two rotating input sets as the lab's hot mode; a CUDA graph of 20 calls),
# then `verify --quick` with NVRTC 13 and with NVRTC 12.6, each split by precision into six
# processes side by side (round 4's single process per NVRTC needed more than 7 minutes).
# From the repo root with .device/{bin,py,nvrtc12} carried.
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
python3 -m pip install --no-index --no-deps --target /tmp/site "$D"/py/*.whl > "$L/pip.log" 2>&1
mkdir -p /tmp/nv12 && python3 -m zipfile -e "$D"/nvrtc12/*.whl /tmp/nv12
NV12=/tmp/nv12/nvidia/cuda_nvrtc/lib
export PYTHONPATH=/tmp/site SDPA_LAB_BIN=$D/bin/sdpa-lab
SDPA_CACHE_DIR=/tmp/kc-nvrtc13 timeout 120 "$D/bin/sdpa-lab" check --arch sm_90a --summary > "$L/check13.log" 2>&1 &
SDPA_CACHE_DIR=/tmp/kc-nvrtc12 SDPA_NVRTC_PATH=$NV12 timeout 150 "$D/bin/sdpa-lab" check --arch sm_90a --summary > "$L/check12.log" 2>&1 &
wait
say "checks: $(tail -1 "$L/check13.log" | cut -c1-60) / $(tail -1 "$L/check12.log" | cut -c1-60)"
export SDPA_CACHE_DIR=/tmp/kc-nvrtc13
timeout 150 "$D/bin/sdpa-lab" bench --suite fa --quick --precision bf16 --filter d128 --no-ceilings --out "$L/bench.json" > "$L/bench.log" 2>&1
say "bench rc=$?"
timeout 150 python3 examples/python/lab_vs_python.py "$L/bench.json" > "$L/lab_vs_python.log" 2>&1
say "lab_vs_python rc=$?"
v() {  # nvrtc name, precision, extra args, then VAR=value assignments
  local n=$1 p=$2 extra=$3; shift 3
  ( [ $# -gt 0 ] && export "$@"; export SDPA_CACHE_DIR=/tmp/kc-$n
    timeout 330 "$D/bin/sdpa-lab" verify --quick $extra --filter "/$p/" --json "$L/$n-$p-verify.json" > "$L/$n-$p-verify.log" 2>&1
    echo "$n $p verify rc=$? | $(grep -E '^verify:' "$L/$n-$p-verify.log")" >> "$L/verify.txt" )
}
for p in f16 bf16 fp8kv_f16 fp8kv_bf16 fp8 simfp8; do
  extra=--no-codec; [ "$p" = f16 ] && extra=
  v nvrtc13 "$p" "$extra" &
  v nvrtc12 "$p" "$extra" SDPA_NVRTC_PATH=$NV12 &
done
wait
say "verify done"
tar czf "$O/logs.tgz" -C /tmp logs
sort "$L/verify.txt"; cat "$L/summary.txt" "$L/lab_vs_python.log"
