#!/bin/bash
# Round 24, run 125: the decode suite with peers on the shipped fragment-decode kernel
# (PyTorch's backends, FlashInfer), and `sdpa-lab profile`'s first GPU run: Nsight Compute
# metrics and the truth check (bench median against ncu's time per call) on decode and fa
# cases.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/flashinfer/*.whl && export PYTHONPATH=/tmp/site
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT/r
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
timeout 260 sdpa-lab bench --suite decode --peers --out $OUT/bench_decode.json > $OUT/r/bench_decode.log 2>&1; el "bench decode rc=$?"
rm -rf $OUT/bench_decode.peers
timeout 120 sdpa-lab profile --suite decode --filter b32_sq1_skv4k_hkv8 --precision f16,fp8kv_f16 --out $OUT/r/profile_decode > $OUT/r/profile_decode.log 2>&1; el "profile decode rc=$?"
timeout 120 sdpa-lab profile --suite fa --quick --filter d128_s4k --precision f16 --out $OUT/r/profile_fa > $OUT/r/profile_fa.log 2>&1; el "profile fa rc=$?"
tail -5 $OUT/r/profile_decode.log $OUT/r/profile_fa.log
cat $OUT/r/profile_decode/profile.md $OUT/r/profile_fa/profile.md 2>/dev/null | head -60
python3 docs/results/2026-11-25-h100-round24/decode_table.py $OUT/bench_decode.json 2>&1 | grep fp8 | cut -c1-260
cd $OUT && rm -rf r/profile_*/profile/*.ncu-rep && tar czf run125.tgz --exclude run125.tgz * && find . -mindepth 1 ! -name run125.tgz -delete
