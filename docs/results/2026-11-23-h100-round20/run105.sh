#!/bin/bash
# Round 20, run 105: D256 fragment decode, second round: S 2k and 8k (not reached in run 104),
# then S 512 / 1k / 4k again; m64 and m128 fragment tiles against the defaults, FP8-KV and fp8.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
T0=$(date +%s); mkdir -p $OUT/r artifacts/cache
el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
V="--variant portable.m64.n64.w4.s2.b2.ctfelx --variant portable.m128.n64.w8.s2.b1.ctfelx"
for c in s2k s8k s1k s512 s4k; do
  [ $(( $(date +%s)-T0 )) -gt 480 ] && { el "stop before $c"; break; }
  timeout 70 sdpa-lab bench --suite fa,fp8 --filter d256_${c} --precision f16,bf16,fp8kv_f16,fp8kv_bf16,fp8 --no-ceilings --out $OUT/r/b_def_${c}.json > $OUT/r/b_def_${c}.log 2>&1; el "def $c rc=$?"
  timeout 70 sdpa-lab bench --suite fa,fp8 --filter d256_${c} --precision fp8kv_f16,fp8kv_bf16,fp8 $V --no-ceilings --out $OUT/r/b_frag_${c}.json > $OUT/r/b_frag_${c}.log 2>&1; el "frag $c rc=$?"
done
python3 .device/sum79.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
