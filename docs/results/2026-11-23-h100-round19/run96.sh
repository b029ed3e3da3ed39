#!/bin/bash
# Round 19, run 96: K staged + V fragment-decoded (ctfv) against fragment decode (shipped) and
# 16-bit, causal S 512-2k, D64 and D128; verify of the four ctfv tiles first.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
T0=$(date +%s); mkdir -p $OUT/r
el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
sdpa-lab verify --filter ctfv --no-codec --json $OUT/r/verify_ctfv.json > $OUT/r/verify_ctfv.log 2>&1; el "verify rc=$?"
tail -3 $OUT/r/verify_ctfv.log
for r in 1 2; do for d in d64 d128; do for s in s512 s1k s2k; do
  a=portable.m128.n64.w4.s2.b2.ctfvhelx; b=portable.m128.n64.w4.s3.b2.ctfvhelx
  [ $d = d64 ] && a=portable.m128.n128.w4.s2.b2.ctfvhelx && b=portable.m128.n128.w4.s3.b2.ctfvhelx
  timeout 60 sdpa-lab bench --suite fa,fp8 --filter ${d}_${s}_causal --precision f16,bf16,fp8kv_f16,fp8kv_bf16,fp8 --no-ceilings --out $OUT/r/b_def_${d}_${s}_$r.json > $OUT/r/b_def_${d}_${s}_$r.log 2>&1; el "def ${d}_${s}_$r rc=$?"
  timeout 60 sdpa-lab bench --suite fa,fp8 --filter ${d}_${s}_causal --precision fp8kv_f16,fp8kv_bf16,fp8 --variant $a --variant $b --no-ceilings --out $OUT/r/b_kst_${d}_${s}_$r.json > $OUT/r/b_kst_${d}_${s}_$r.log 2>&1; el "kst ${d}_${s}_$r rc=$?"
done; done; done
python3 .device/sum79.py $OUT/r > $OUT/r/summary.txt
cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
