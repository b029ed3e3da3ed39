#!/bin/bash
# Round 24, run 127: the multi-shape tune's FP8-KV decode winner (run 124) beside the default
# on the whole FP8-KV decode suite, same run.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
sdpa-lab bench --suite decode --precision fp8kv_f16 --variant decode.m16.n64.w4.s3.b2.cex --variant decode.m16.n128.w4.s4.b2.cex --out $OUT/bench_tuned.json
