#!/bin/bash
export SDPA_CACHE_DIR=$PWD/artifacts/cache; mkdir -p $OUT
timeout 150 .device/bin/gpu fragment_decode --include-ignored --test-threads=1 2>&1 | tee $OUT/test_gpu_frag.log | grep -E "^test |test result|panicked"
