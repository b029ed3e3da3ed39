#!/bin/bash
# Round 24, run 124: fragment decode in the decode family (8-bit K/V decoded in registers
# from 8-bit ldmatrix fragments; no staging tile) against run 123's staged decode; the tuner
# over several shapes per class (decode FP8-KV, Hopper fp16 D128 prefill) and verify of the
# winners.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT/r
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
for t in gpu-test attn_paged_gpu-test; do
  timeout 100 .device/tests/$t --include-ignored > $OUT/r/$t.log 2>&1; el "$t rc=$?"
  grep -E "test result|FAILED|panicked" $OUT/r/$t.log | head -4
done
timeout 150 sdpa-lab verify --filter decode --quick --seeds 2 --no-codec --json $OUT/r/verify_decode.json > $OUT/r/verify_decode.log 2>&1; el "verify decode rc=$?"
grep -E "^verify:" $OUT/r/verify_decode.log | tail -1; grep -E "FAIL" $OUT/r/verify_decode.log | head -5
for tool in memcheck racecheck; do
  S=decode.m16.n64.w4.s3.b2.cex/fp8kv_bf16/d128/causal
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/s.json > $OUT/r/san_$tool.log 2>&1; el "$tool rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^verify:" $OUT/r/san_$tool.log | tail -2
done
timeout 100 sdpa-lab bench --suite decode --out $OUT/bench_decode.json > $OUT/r/bench_decode.log 2>&1; el "bench decode rc=$?"
timeout 130 sdpa-lab tune --family decode --shape-class decode --precision fp8kv_f16 --budget 24 --time 110 --cache $OUT/r/dec8.jsonl --out $OUT/r/dec8 > $OUT/r/dec8.log 2>&1; el "tune decode rc=$?"
tail -2 $OUT/r/dec8.log
timeout 170 sdpa-lab tune --family hopper --precision f16 --head-dim 128 --budget 24 --time 150 --cache $OUT/r/hop.jsonl --out $OUT/r/hop > $OUT/r/hop.log 2>&1; el "tune hopper rc=$?"
tail -2 $OUT/r/hop.log
for d in dec8 hop; do
  B=$(python3 -c "import json;t=json.load(open('$OUT/r/$d/topk.json'));print(t['topk'][0]['variant'] if t['topk'][0]['variant']!=t['default'] else '')" 2>/dev/null)
  [ -n "$B" ] || { echo "$d: the default won or no result"; continue; }
  timeout 100 sdpa-lab verify --variant $B --quick --seeds 1 --no-codec --json $OUT/r/verify_$d.json > $OUT/r/verify_$d.log 2>&1; el "verify $B rc=$?"
  grep -E "^verify:" $OUT/r/verify_$d.log | tail -1
done
python3 docs/results/2026-11-25-h100-round24/decode_table.py $OUT/bench_decode.json 2>&1 | cut -c1-200 | head -60
python3 - $OUT/r <<'PY'
import json, sys
for d in ['dec8', 'hop']:
    try: t = json.load(open(f"{sys.argv[1]}/{d}/topk.json"))
    except Exception as e: print(d, 'no topk', e); continue
    print(d, t['evaluations'], 'evals', round(t['seconds']), 's; default', t['default'])
    for k in t['topk'][:5]: print('   ', k['variant'], round(k['median_us'], 2), 'us (geomean)')
PY
cd $OUT && tar czf run124.tgz --exclude run124.tgz * && find . -mindepth 1 ! -name run124.tgz -delete
