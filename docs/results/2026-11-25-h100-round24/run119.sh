#!/bin/bash
# Round 24, run 119 (nvidia-h100-x2): issue 33's first multi-GPU run (cp-bench, 2 ranks,
# S 128k, D128, H16: non-causal, causal, and both with FP8-KV shards), then the decode
# family's first GPU checks after the relocation fix (the two GPU tests, verify of every
# decode spec on 3 seeds, memcheck and racecheck of one spec each) and the decode suite
# with the two decode variants beside the shipped default and PyTorch's backends.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/.device/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader; nvidia-smi topo -m | head -4
for f in "" "--causal" "--fp8-kv" "--causal --fp8-kv"; do
  n=cp$(echo "$f" | tr -d ' -'); timeout 120 sdpa-lab cp-bench --ranks 2 --iters 5 $f --out $OUT/$n > $OUT/$n.log 2>&1; el "cp-bench $f rc=$?"
  tail -6 $OUT/$n.log
done
timeout 90 .device/tests/gpu-test --include-ignored decode_family paged_cache > $OUT/gpu_tests.log 2>&1; el "gpu tests rc=$?"
grep -E "^test |test result|panicked" $OUT/gpu_tests.log | head -8
timeout 150 sdpa-lab verify --filter decode --quick --seeds 3 --no-codec --json $OUT/verify_decode.json > $OUT/verify_decode.log 2>&1; el "verify decode rc=$?"
grep -E "verify:" $OUT/verify_decode.log; grep -iE "fail" $OUT/verify_decode.log | head -5
for tool in memcheck racecheck; do
  for S in decode.m16.n64.w4.s3.b2.cex/fp8kv_f16/d128/causal decode.m16.n32.w2.s4.b4.cex/f16/d128/full; do
    timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/s.json > $OUT/san_${tool}_${S//\//_}.log 2>&1; el "$tool $S rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" $OUT/san_${tool}_${S//\//_}.log | tail -2
  done
done
timeout 150 sdpa-lab bench --suite decode --peers --variant decode.m16.n64.w4.s3.b2.cex --variant decode.m16.n32.w2.s4.b4.cex --out $OUT/bench_decode.json > $OUT/bench_decode.log 2>&1; el "bench decode rc=$?"
timeout 60 sdpa-lab bench --suite decode --out $OUT/bench_decode_default.json > $OUT/bench_decode_default.log 2>&1; el "bench decode default rc=$?"
tail -30 $OUT/bench_decode.log; tail -12 $OUT/bench_decode_default.log
