#!/bin/bash
# Round 23, run 118: first GPU run of the decode family (issue 27): the two GPU tests (decode
# shapes through the registered variants; a paged cache with scattered pages and ragged
# lengths), verify of the 4-warp variant over the verify and decode shapes (one seed), and
# memcheck of one E4M3-KV causal spec. Kernels from the carried cache (compiled here).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/.device/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
timeout 45 .device/tests/gpu-test --include-ignored decode_family paged_cache > $OUT/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "^test |test result|panicked|assert" $OUT/gpu_tests.log | head -12
timeout 45 sdpa-lab verify --variant decode.m16.n64.w4.s3.b2.cex --quick --seeds 1 --no-codec --json $OUT/verify_decode.json > $OUT/verify_decode.log 2>&1; el "verify rc=$?"
grep -E "verify:" $OUT/verify_decode.log; grep -E " [1-9][0-9]* +[0-9.e+-]+ " $OUT/verify_decode.log | grep -v " 0 " | head -5
timeout 25 compute-sanitizer --tool memcheck --error-exitcode 9 sdpa-lab verify --filter decode.m16.n64.w4.s3.b2.cex/fp8kv_f16/d128/causal --quick --seeds 1 --no-codec --json /tmp/m.json > $OUT/memcheck.log 2>&1; el "memcheck rc=$?"
grep -E "ERROR SUMMARY|verify:" $OUT/memcheck.log
