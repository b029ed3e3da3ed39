#!/bin/bash
# Round 27, run 149 (one GPU): (1) issue 28, verify of the D256 FP8 Hopper tiles with the LSE
# bound scaled by sqrt(D / 128) (three seeds); (2) issue 31, fp8-sdpa-candle's GPU tests (varlen
# included) and the Llama-style decode example (candle-varlen branch binaries).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT
P=hopper.m128.n64.w12.s3.b1.w4pgex; N=hopper.m128.n64.w12.s3.b1.w4gex
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout -s KILL 200 sdpa-lab verify --variant $P --variant $N --filter /fp8/d256 --seeds 3 --no-codec --json $OUT/verify.json > $OUT/verify.log 2>&1; echo "verify rc=$?"
grep -A8 "^spec " $OUT/verify.log | head -8
mkdir -p /tmp/c && tar -xJf .device/candle.tar.xz -C /tmp/c
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib SDPA_NVRTC_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib
timeout -s KILL 200 /tmp/c/test-gpu --include-ignored > $OUT/candle-tests.log 2>&1; echo "candle tests rc=$?"; grep -E "^test |test result" $OUT/candle-tests.log
timeout -s KILL 150 /tmp/c/example-decode > $OUT/example-decode.log 2>&1; echo "example-decode rc=$?"; tail -5 $OUT/example-decode.log
timeout -s KILL 240 /tmp/c/example-llama_decode --batch 8 --prompt 1024 --gen 128 > $OUT/llama-bf16.log 2>&1; echo "llama bf16 rc=$?"; tail -30 $OUT/llama-bf16.log
