#!/bin/bash
# Round 19, run 99: the seeds' u8 code (simfp8) at causal S 512-4k: shipped default against
# fragment decode (two rounds up to S 2k, one at S 4k).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
T0=$(date +%s); mkdir -p $OUT/r artifacts/cache
el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
for r in 1 2; do for d in d64 d128; do for s in s512 s1k s2k s4k; do
  [ $s = s4k ] && [ $r = 2 ] && continue
  f=portable.m128.n64.w4.s2.b2.ctfhelx; [ $d = d64 ] && f=portable.m128.n128.w4.s2.b2.ctfhelx
  timeout 60 sdpa-lab bench --suite fp8 --filter ${d}_${s}_causal --precision simfp8 --no-ceilings --out $OUT/r/b_def_${d}_${s}_$r.json > $OUT/r/b_def_${d}_${s}_$r.log 2>&1; el "def ${d}_${s}_$r rc=$?"
  timeout 60 sdpa-lab bench --suite fp8 --filter ${d}_${s}_causal --precision simfp8 --variant $f --no-ceilings --out $OUT/r/b_frag_${d}_${s}_$r.json > $OUT/r/b_frag_${d}_${s}_$r.log 2>&1; el "frag ${d}_${s}_$r rc=$?"
done; done; done
python3 .device/sum79.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
