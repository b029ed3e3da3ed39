#!/bin/bash
# Round 24, run 121: the decode family as the dispatched default for decode-shaped calls.
# Every GPU test (paged attn input included), then the decode suite (Sq 1 and 4, Skv 4k-128k,
# B 1-64, Hkv 8/32, fp16 and FP8-KV, contiguous and paged) with PyTorch's backends and
# FlashInfer 0.7.2 (trimmed wheel, JIT-built on first use), the mission suite with the
# decode variant beside the default, and the copy ceiling in the same run.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/flashinfer/*.whl && export PYTHONPATH=/tmp/site
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
for t in gpu-test attn_gpu-test bench_gpu-test; do
  timeout 150 .device/tests/$t --include-ignored > $OUT/$t.log 2>&1; el "$t rc=$?"
  grep -E "test result|FAILED|panicked" $OUT/$t.log | head -4
done
timeout 330 sdpa-lab bench --suite decode --peers --out $OUT/bench_decode.json > $OUT/bench_decode.log 2>&1; el "bench decode rc=$?"
timeout 40 sdpa-lab bench --suite mission --no-ceilings --out $OUT/mission_default.json > $OUT/mission_default.log 2>&1; el "mission default rc=$?"
timeout 40 sdpa-lab bench --suite mission --no-ceilings --variant decode.m16.n64.w4.s3.b2.cex --variant decode.m16.n32.w2.s4.b4.cex --out $OUT/mission_decode.json > $OUT/mission_decode.log 2>&1; el "mission decode rc=$?"
rm -rf $OUT/bench_decode.peers/rows.json
python3 docs/results/2026-11-25-h100-round24/decode_table.py $OUT/bench_decode.json $OUT/mission_default.json $OUT/mission_decode.json
