#!/bin/bash
# Round 20, run 110 (redo of run 109, whose output was lost with the session): on b6925e5,
# every test binary with --include-ignored, the full verify, and causal S 512 / 2k at D64 and
# D128 (16-bit and FP8-KV defaults, two rounds).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
mkdir -p artifacts/cache $OUT/r
T0=$(date +%s); el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
for t in .device/tests/*; do
  n=$(basename $t)
  timeout 200 $t --include-ignored --test-threads=1 > $OUT/r/test_$n.log 2>&1; el "$n rc=$?"
  grep -E "^test result|FAILED|panicked" $OUT/r/test_$n.log | head -5
done
timeout 330 sdpa-lab verify --json $OUT/r/verify.json > $OUT/r/verify.log 2>&1; el "verify rc=$?"
tail -3 $OUT/r/verify.log
for r in 1 2; do for d in d64 d128; do for s in s512 s2k; do
  [ $(( $(date +%s)-T0 )) -gt 560 ] && { el "stop before $r $d $s"; break 3; }
  timeout 40 sdpa-lab bench --suite fa,fp8 --filter ${d}_${s}_causal --precision f16,bf16,fp8kv_f16,fp8kv_bf16 --no-ceilings --out $OUT/r/b_${d}_${s}_causal_$r.json > $OUT/r/b_${d}_${s}_causal_$r.log 2>&1; el "bench $d $s $r rc=$?"
done; done; done
python3 .device/sum.py $OUT/r > $OUT/r/summary.txt; cat $OUT/r/summary.txt
python3 - <<'PY'
import json, os
p = os.environ['OUT'] + '/r/verify.json'
try:
    v = json.load(open(p))
    if isinstance(v, dict) and 'runs' in v and isinstance(v['runs'], list):
        v['runs'] = len(v['runs'])
        json.dump(v, open(p, 'w'))
except Exception as e:
    print('verify.json:', e)
PY
cd $OUT && tar czf r.tgz r && rm -rf r
