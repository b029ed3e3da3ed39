#!/bin/bash
# Round 25, run 138 (the same warm machine right after run 137, whose fp8kv bench selected the
# fa suite, which has no FP8-KV rows): the fp8 grid at fp8kv_f16, the shipped (portable)
# defaults, then the two Hopper FP8-KV tiles. The second command was killed at 150 s after one
# row: the persistent tile hung (see the FP8-KV notes in docs/perf-notes.md).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache; timeout -s KILL 120 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16 --no-ceilings --out $OUT/bench_fp8kv_default.json > $OUT/d.log 2>&1; echo "rc=$?"; timeout -s KILL 150 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16 --no-ceilings --variant hopper.m128.n128.w12.s2.b1.w4oex --variant hopper.m128.n128.w12.s2.b1.w4pogex --out $OUT/bench_fp8kv_hopper.json > $OUT/h.log 2>&1; echo "rc=$?"; grep -i failed $OUT/h.log | head -3; python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/bench_fp8kv_default.json $OUT/bench_fp8kv_hopper.json
