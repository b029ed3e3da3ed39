#!/bin/bash
# Round 20, run 108: sdpa-lab repro (mission, fa, fp8 suites, PyTorch peers) on HEAD b6925e5.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
T0=$(date +%s)
sdpa-lab repro --suite mission,fa,fp8 --out $OUT/repro > $OUT/repro.log 2>&1; rc=$?
echo "repro rc=$rc $(( $(date +%s)-T0 ))s"
tail -60 $OUT/repro.log
rm -rf $OUT/repro/plots $OUT/repro/bench.peers/rows.json
