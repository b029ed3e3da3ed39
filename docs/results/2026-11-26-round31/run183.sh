#!/bin/bash
# Round 31, run 183 (one GPU): issue 27's closing table on the landing build: the decode suite
# with peers (PyTorch's backends, FlashInfer's decode from the repacked wheel) in one run.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/flashinfer/*.whl || exit 1
mkdir -p /tmp/bin && gunzip -c .ab/sdpa-lab.gz > /tmp/bin/sdpa-lab && chmod +x /tmp/bin/sdpa-lab
export PATH=/tmp/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache PYTHONPATH=/tmp/site
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout -s KILL 330 sdpa-lab bench --suite decode --peers --out $OUT/bench_decode.json > $OUT/bench_decode.log 2>&1; el "bench decode peers rc=$?"
timeout -s KILL 150 sdpa-lab bench --suite mission --precision f16,bf16 --peers --out $OUT/mission.json > $OUT/mission.log 2>&1; el "bench mission peers rc=$?"
rm -rf $OUT/*.peers
python3 docs/results/2026-11-25-h100-round24/decode_table.py $OUT/bench_decode.json 2>&1 | cut -c1-230
python3 docs/results/2026-11-25-h100-round24/decode_table.py $OUT/mission.json 2>&1 | cut -c1-230
