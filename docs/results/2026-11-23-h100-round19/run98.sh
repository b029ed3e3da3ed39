#!/bin/bash
# Round 19, run 98: every GPU test, the full verify, fp8 causal S 4k (default vs fragment decode).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
mkdir -p artifacts/cache $OUT/r
T0=$(date +%s); el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
for t in gpu attn_gpu bench_gpu; do
  timeout 200 .device/bin/$t --include-ignored --test-threads=1 > $OUT/r/test_$t.log 2>&1; el "$t rc=$?"
  grep -E "^test result|FAILED|panicked" $OUT/r/test_$t.log | head -5
done
timeout 300 sdpa-lab verify --json $OUT/r/verify_full.json > $OUT/r/verify_full.log 2>&1; el "verify rc=$?"
tail -4 $OUT/r/verify_full.log
for d in d64 d128; do
  f=portable.m128.n64.w4.s2.b2.ctfhelx; [ $d = d64 ] && f=portable.m128.n128.w4.s2.b2.ctfhelx
  timeout 60 sdpa-lab bench --suite fa,fp8 --filter ${d}_s4k_causal --precision f16,fp8kv_f16,fp8 --no-ceilings --out $OUT/r/b_def_${d}_s4k.json > $OUT/r/b_def_${d}_s4k.log 2>&1; el "def $d rc=$?"
  timeout 60 sdpa-lab bench --suite fa,fp8 --filter ${d}_s4k_causal --precision fp8kv_f16,fp8 --variant $f --no-ceilings --out $OUT/r/b_frag_${d}_s4k.json > $OUT/r/b_frag_${d}_s4k.log 2>&1; el "frag $d rc=$?"
done
python3 .device/sum79.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
