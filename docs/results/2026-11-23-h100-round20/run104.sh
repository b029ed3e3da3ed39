#!/bin/bash
# Round 20, run 104: fragment decode at D256 (16 rows per warp): verify of the five
# experiment tiles, then one round of the D256 fa grid against the 16-bit and shipped defaults.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
T0=$(date +%s); mkdir -p $OUT/r artifacts/cache
el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
for f in ctfelx m64.n64.w4.s2.b2.ctfhelx; do
  timeout 150 sdpa-lab verify --filter $f --no-codec --json $OUT/r/verify_$f.json > $OUT/r/verify_$f.log 2>&1; el "verify $f rc=$?"
  tail -2 $OUT/r/verify_$f.log
done
V="--variant portable.m64.n64.w4.s2.b2.ctfelx --variant portable.m64.n64.w4.s2.b2.ctfhelx --variant portable.m64.n32.w4.s2.b2.ctfelx --variant portable.m64.n32.w4.s3.b2.ctfelx --variant portable.m128.n64.w8.s2.b1.ctfelx"
for c in s1k s4k s512 s16k s2k s8k; do
  [ $(( $(date +%s)-T0 )) -gt 500 ] && { el "stop before $c"; break; }
  timeout 60 sdpa-lab bench --suite fa,fp8 --filter d256_${c} --precision f16,bf16,fp8kv_f16,fp8kv_bf16 --no-ceilings --out $OUT/r/b_def_${c}.json > $OUT/r/b_def_${c}.log 2>&1; el "def $c rc=$?"
  timeout 90 sdpa-lab bench --suite fa,fp8 --filter d256_${c} --precision fp8kv_f16,fp8kv_bf16 $V --no-ceilings --out $OUT/r/b_frag_${c}.json > $OUT/r/b_frag_${c}.log 2>&1; el "frag $c rc=$?"
done
python3 .device/sum79.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
