#!/bin/bash
# Round 31, run 185 (one GPU): issue 28 item 2 at D256, where FP8-KV prefill still ran on the
# portable family (0.48-0.55x our 16-bit, run 182): the Hopper FP8-KV tile (producer-warpgroup
# decode into the 16-bit tiles) fits at D256 with 48 or 32 keys per stage (two consumer
# warpgroups) or 64 keys with one (64-row tiles), spill-free. Verify them, then time them
# against the shipped portable pick and our 16-bit D256 tile, two passes.
mkdir -p /tmp/bin && gunzip -c .ab/sdpa-lab.gz > /tmp/bin/sdpa-lab && chmod +x /tmp/bin/sdpa-lab
export PATH=/tmp/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
N48=hopper.m128.n48.w12.s2.b1.w4ogex; N32=hopper.m128.n32.w12.s2.b1.w4ogex; M64=hopper.m64.n64.w8.s2.b1.w4oex
timeout -s KILL 60 sdpa-lab verify --variant $N48 --filter fp8kv_f16/d256/full --quick --seeds 1 --no-codec --json /tmp/smoke.json > $OUT/smoke.log 2>&1; rc=$?; el "smoke rc=$rc"
grep "verify:" $OUT/smoke.log | tail -1; [ $rc = 137 ] && exit 1
timeout -s KILL 150 sdpa-lab verify --variant $N48 --variant $N32 --variant $M64 --filter /d256 --quick --seeds 2 --no-codec --json /tmp/v.json > $OUT/verify.log 2>&1; el "verify rc=$?"
grep "verify:" $OUT/verify.log | tail -1; grep -iE "fail" $OUT/verify.log | grep -v "^spec" | head -6
for pass in 1 2; do
  timeout -s KILL 120 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16 --filter d256 --variant $N48 --variant $N32 --variant $M64 --no-ceilings --out $OUT/kv_try$pass.json > /dev/null 2>&1; el "fp8kv d256 variants $pass rc=$?"
  timeout -s KILL 60 sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16 --filter d256 --no-ceilings --out $OUT/kv_ship$pass.json > /dev/null 2>&1; el "fp8kv d256 shipped $pass rc=$?"
  timeout -s KILL 60 sdpa-lab bench --suite fa --quick --precision f16 --filter d256 --no-ceilings --out $OUT/f16_$pass.json > /dev/null 2>&1; el "f16 d256 $pass rc=$?"
done
python3 - $OUT <<'PY'
import json, sys, glob
O = sys.argv[1]; T = {}
for f in glob.glob(f'{O}/*.json'):
    for r in json.load(open(f))['rows']:
        if r['status'] != 'ok' or r['implementation'] != 'fp8-sdpa': continue
        k = (r['case'], r['precision'] + ' ' + r['backend'])
        T[k] = max(T.get(k, 0), r['tflops'])
f16 = {c: v for (c, b), v in T.items() if b.startswith('f16')}
for (c, b), v in sorted(T.items()):
    print(f"{c:18s} {b:46s} {v:6.1f}  x16 {v / f16[c] if c in f16 else 0:.3f}")
PY
