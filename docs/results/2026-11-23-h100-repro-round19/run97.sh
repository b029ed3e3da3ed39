#!/bin/bash
# Round 19, run 97: sdpa-lab repro (mission, fa, fp8 suites, PyTorch peers) on HEAD fb74cc1.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
T0=$(date +%s)
sdpa-lab repro --suite mission,fa,fp8 --out $OUT/repro > $OUT/repro.log 2>&1; rc=$?
echo "repro rc=$rc $(( $(date +%s)-T0 ))s"
tail -60 $OUT/repro.log
