#!/bin/bash
# Round 25, run 133: the FP8 Hopper kernel after run 132's two findings: O accumulates each
# key block's P.V in its own accumulator, added in fp32 (8-bit wgmma's reduced-precision
# accumulation drifted O at S 16k: rel L2 0.067), and the LSE tolerance of 8-bit scores.
# Dispatch now picks it for full FP8 at D64/D128. GPU tests, verify of every hopper spec,
# sanitizers on the two FP8 defaults, then the fp8 grid (quick) with the defaults and peers.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
for t in gpu-test attn_gpu-test; do
  timeout -s KILL 120 .device/tests/$t --include-ignored > $OUT/$t.log 2>&1; el "$t rc=$?"; grep -E "test result|FAILED|panicked" $OUT/$t.log | head -5
done
timeout -s KILL 200 sdpa-lab verify --filter hopper --quick --no-codec --json $OUT/verify.json > $OUT/verify.log 2>&1; el "verify hopper rc=$?"
python3 docs/results/2026-11-26-h100-round25/vsum.py $OUT/verify.json /fp8/ | head -24
for S in hopper.m128.n128.w12.s2.b1.w4pogex/fp8/d128/full hopper.m128.n128.w12.s2.b1.w4oex/fp8/d128/causal hopper.m128.n128.w12.s2.b1.w4pogex/fp8/d64/causal; do
  for tool in memcheck racecheck; do
    timeout -s KILL 100 compute-sanitizer --tool $tool --error-exitcode 9 sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/s.json > /tmp/san.log 2>&1; el "$tool $S rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" /tmp/san.log | tail -2
  done
done
timeout -s KILL 200 sdpa-lab bench --suite fp8 --quick --precision fp8 --peers --out $OUT/bench_fp8.json > $OUT/bench_fp8.log 2>&1; el "bench fp8 + peers rc=$?"
grep -iE "failed" $OUT/bench_fp8.log | head -5
python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/bench_fp8.json
grep -iE "gemm_fp8|copy" $OUT/bench_fp8.log | head -3
