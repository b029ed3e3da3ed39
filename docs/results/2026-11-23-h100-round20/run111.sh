#!/bin/bash
# Round 20, run 111: the cells nearest 1.0 in run 108, two rounds each (b6925e5 binaries):
# D128 S 1k non-causal, D64 and D128 causal S 4k; 16-bit and FP8-KV shipped defaults.
# Prediction (before the run): D128 S 1k fp8kv_f16 / f16 0.99-1.01 (a tie); causal S 4k D64
# 0.98-1.00 in fp16 and 0.96-0.98 in bf16; D128 bf16 0.98-1.00.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
mkdir -p artifacts/cache $OUT/r
T0=$(date +%s); el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
for r in 1 2; do for c in d128_s1k d64_s4k_causal d128_s4k_causal; do
  timeout 60 sdpa-lab bench --suite fa,fp8 --filter $c --precision f16,bf16,fp8kv_f16,fp8kv_bf16 --no-ceilings --out $OUT/r/b_${c}_$r.json > $OUT/r/b_${c}_$r.log 2>&1; el "bench $c $r rc=$?"
done; done
python3 .device/sum.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
