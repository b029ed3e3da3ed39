#!/bin/bash
# Round 27, run 151 (one GPU): run 150's machine was released before its bench finished, so
# again: the same-run fa bench (f16, --quick) of the dense defaults, base build (e7dac06)
# against this one, two interleaved passes; and the varlen GPU tests after the fix of one
# test's bad-offsets case (its expected message).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
export SDPA_NVRTC_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib
mkdir -p artifacts/cache $OUT
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
timeout -s KILL 150 .device/tests/gpu_varlen-test --include-ignored > $OUT/gpu_varlen.log 2>&1; el "gpu_varlen rc=$?"; grep -E "test result|FAILED" $OUT/gpu_varlen.log
timeout -s KILL 60 compute-sanitizer --tool memcheck --error-exitcode 9 .device/tests/gpu_varlen-test --include-ignored bad_offsets > $OUT/san.log 2>&1; el "memcheck bad_offsets rc=$?"; grep -E "ERROR SUMMARY|test result" $OUT/san.log
for pass in 1 2; do
  timeout -s KILL 100 .device/base/sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $OUT/base$pass.json > /dev/null 2>&1; el "bench base pass $pass rc=$?"
  timeout -s KILL 100 sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $OUT/new$pass.json > /dev/null 2>&1; el "bench new pass $pass rc=$?"
done
python3 docs/results/2026-11-26-round27/benchcmp.py $OUT
