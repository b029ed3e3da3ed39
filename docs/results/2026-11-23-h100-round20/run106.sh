#!/bin/bash
# Round 20, run 106: fragment decode with 16 rows per warp at three or four blocks per SM, D64
# and D128 causal S 512-2k (verify first); simfp8 at D256 on the m64 fragment tile.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
T0=$(date +%s); mkdir -p $OUT/r artifacts/cache
el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
for f in b3.ctf b4.ctf; do
  timeout 120 sdpa-lab verify --filter $f --no-codec --json $OUT/r/verify_$f.json > $OUT/r/verify_$f.log 2>&1; el "verify $f rc=$?"
  tail -2 $OUT/r/verify_$f.log
done
for d in d128 d64; do for s in s512 s1k s2k; do
  [ $(( $(date +%s)-T0 )) -gt 430 ] && { el "stop before $d $s"; break; }
  V="--variant portable.m64.n32.w4.s2.b3.ctfelx --variant portable.m64.n32.w4.s3.b3.ctfelx"
  [ $d = d64 ] && V="--variant portable.m64.n64.w4.s2.b4.ctfelx --variant portable.m64.n128.w4.s2.b3.ctfhelx"
  timeout 50 sdpa-lab bench --suite fa,fp8 --filter ${d}_${s}_causal --precision f16,bf16,fp8kv_f16,fp8kv_bf16 --no-ceilings --out $OUT/r/b_def_${d}_${s}.json > $OUT/r/b_def_${d}_${s}.log 2>&1; el "def $d $s rc=$?"
  timeout 50 sdpa-lab bench --suite fa,fp8 --filter ${d}_${s}_causal --precision fp8kv_f16,fp8kv_bf16 $V --no-ceilings --out $OUT/r/b_frag_${d}_${s}.json > $OUT/r/b_frag_${d}_${s}.log 2>&1; el "frag $d $s rc=$?"
done; done
for s in s1k s4k; do
  [ $(( $(date +%s)-T0 )) -gt 500 ] && break
  timeout 40 sdpa-lab bench --suite fp8 --filter d256_${s} --precision simfp8 --no-ceilings --out $OUT/r/b_sdef_${s}.json > $OUT/r/b_sdef_${s}.log 2>&1; el "simfp8 def $s rc=$?"
  timeout 40 sdpa-lab bench --suite fp8 --filter d256_${s} --precision simfp8 --variant portable.m64.n64.w4.s2.b2.ctfelx --no-ceilings --out $OUT/r/b_sfrag_${s}.json > $OUT/r/b_sfrag_${s}.log 2>&1; el "simfp8 frag $s rc=$?"
done
python3 .device/sum79.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
