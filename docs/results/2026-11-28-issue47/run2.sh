#!/usr/bin/env bash
# Issue 47, GPU round 2: one build (cudarc's CUDA 13 bindings, the machine's CUDA 13 driver)
# with NVRTC 13 (found by the library's own search, chosen for the driver) and with NVRTC 12.6
# (the pip wheel, carried; SDPA_NVRTC_PATH), side by side: `sdpa-lab env`, `check --arch
# sm_90a` (which also fills each kernel cache), every GPU test, `verify --quick`.
# From the repo root with .device/ carried (pack.sh's bin/ and tests/, the tests gzipped, plus .device/nvrtc12/*.whl).
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs; mkdir -p "$L" "$O"; D=$PWD/.device
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/gpu.txt"
mkdir -p /tmp/nv12 /tmp/tests && python3 -m zipfile -e "$D"/nvrtc12/*.whl /tmp/nv12
for t in "$D"/tests/*.gz; do gunzip -c "$t" > "/tmp/tests/$(basename "$t" .gz)"; done; chmod +x /tmp/tests/*
pipeline() {  # name, then VAR=value assignments
  local n=$1; shift
  (
    [ $# -gt 0 ] && export "$@"
    export SDPA_LAB_BIN=$D/bin/sdpa-lab SDPA_CACHE_DIR=/tmp/kc-$n
    t0=$SECONDS
    "$D/bin/sdpa-lab" env > "$L/$n-env.log" 2>&1
    echo "$n env rc=$? | $(grep -i 'nvrtc' "$L/$n-env.log" | head -1)"
    timeout 240 "$D/bin/sdpa-lab" check --arch sm_90a --summary > "$L/$n-check.log" 2>&1
    echo "$n check rc=$? | $(tail -1 "$L/$n-check.log") [$((SECONDS - t0))s]"
    for t in /tmp/tests/*; do
      case "$t" in *cp_ring_gpu*) continue ;; esac  # two GPUs
      b=$(basename "$t")
      timeout 240 "$t" --include-ignored --test-threads 4 > "$L/$n-test-$b.log" 2>&1
      rc=$?
      echo "$n $b rc=$rc | $(grep -E '^test result' "$L/$n-test-$b.log" | tail -1 | cut -c1-70)"
      [ $rc -ne 0 ] && grep -E '^---- |panicked' "$L/$n-test-$b.log" | head -6
    done
    echo "$n tests done [$((SECONDS - t0))s]"
    timeout 240 "$D/bin/sdpa-lab" verify --quick --json "$L/$n-verify.json" > "$L/$n-verify.log" 2>&1
    echo "$n verify rc=$? | $(tail -3 "$L/$n-verify.log" | tr '\n' ' ') [$((SECONDS - t0))s]"
  ) > "$L/$n-summary.txt" 2>&1
}
pipeline nvrtc13 &
pipeline nvrtc12 SDPA_NVRTC_PATH=/tmp/nv12/nvidia/cuda_nvrtc/lib &
wait
tar czf "$O/logs.tgz" -C /tmp logs
cat "$L"/nvrtc13-summary.txt "$L"/nvrtc12-summary.txt
