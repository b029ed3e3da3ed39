#!/bin/bash
# Round 19, run 100: the simfp8 dispatch build: GPU tests, verify of the fragment-decode tiles,
# simfp8 through dispatch at causal S 512 / 1k (D64, D128).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
T0=$(date +%s); mkdir -p $OUT/r artifacts/cache
el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
timeout 200 .device/bin/gpu --include-ignored --test-threads=1 > $OUT/r/test_gpu.log 2>&1; el "gpu rc=$?"
grep -E "^test |^test result" $OUT/r/test_gpu.log
timeout 200 sdpa-lab verify --filter ctfhelx --no-codec --json $OUT/r/verify_frag.json > $OUT/r/verify_frag.log 2>&1; el "verify rc=$?"
tail -2 $OUT/r/verify_frag.log
for c in d64_s512_causal d64_s1k_causal d128_s512_causal d128_s1k_causal; do
  timeout 60 sdpa-lab bench --suite fp8 --filter $c --precision simfp8 --no-ceilings --out $OUT/r/b_def_$c.json > $OUT/r/b_def_$c.log 2>&1; el "$c rc=$?"
done
python3 .device/sum79.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
