#!/bin/bash
# Round 20, run 107: the committed build: every GPU test, verify of every fragment-decode spec,
# and D64 causal S 512 again (two rounds): dispatch (now the four-block tile for FP8-KV)
# against the 128-row fragment tile.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
mkdir -p artifacts/cache $OUT/r
T0=$(date +%s); el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
for t in gpu attn_gpu bench_gpu; do
  timeout 200 .device/bin/$t --include-ignored --test-threads=1 > $OUT/r/test_$t.log 2>&1; el "$t rc=$?"
  grep -E "^test |^test result|FAILED|panicked" $OUT/r/test_$t.log | head -20
done
timeout 200 sdpa-lab verify --filter ctf --no-codec --json $OUT/r/verify_ctf.json > $OUT/r/verify_ctf.log 2>&1; el "verify ctf rc=$?"
tail -2 $OUT/r/verify_ctf.log
for r in 1 2; do
  [ $(( $(date +%s)-T0 )) -gt 520 ] && break
  timeout 40 sdpa-lab bench --suite fa,fp8 --filter d64_s512_causal --precision f16,bf16,fp8kv_f16,fp8kv_bf16,fp8 --no-ceilings --out $OUT/r/b_def_$r.json > $OUT/r/b_def_$r.log 2>&1; el "def $r rc=$?"
  timeout 40 sdpa-lab bench --suite fa,fp8 --filter d64_s512_causal --precision fp8kv_f16,fp8kv_bf16,fp8 --variant portable.m128.n128.w4.s2.b2.ctfhelx --variant portable.m64.n64.w4.s2.b4.ctfelx --no-ceilings --out $OUT/r/b_frag_$r.json > $OUT/r/b_frag_$r.log 2>&1; el "frag $r rc=$?"
done
python3 .device/sum79.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
cd $OUT && tar czf r.tgz r && rm -rf r
