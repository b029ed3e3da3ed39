#!/bin/bash
# Round 30, run 177 (one GPU): issue 28 item 2. Hypothesis left by run 171 and 172: the FP8-KV
# gap is the producer's per-stage latency (wait for EMPTY, decode, fence, arrive) on the
# consumers' path, not shared-memory bandwidth nor consumer registers. At D64 a third stage fits
# (181 KB): one more key block of slack. Verify the three-stage persistent tile on FP8-KV D64,
# then the fp8 suite's D64 FP8-KV rows with two and three stages (two interleaved passes) and
# the 16-bit D64 defaults, one run, landing build (cfb6a32).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT/run177
R=$OUT/run177
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name --format=csv,noheader
S2=hopper.m128.n128.w12.s2.b1.w4pogex; S3=hopper.m128.n128.w12.s3.b1.w4pogex
timeout -s KILL 90 sdpa-lab verify --variant $S3 --filter fp8kv_ --quick --seeds 2 --no-codec --json /tmp/v.json > $R/v.log 2>&1; el "verify s3 rc=$?"
grep "verify:" $R/v.log | tail -1; grep -iE "fail" $R/v.log | grep -v "^spec" | head -4
for pass in 1 2; do
  for V in $S2 $S3; do
    timeout -s KILL 100 sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --filter d64 --variant $V --no-ceilings --out $R/${V##*.w12.}_$pass.json > /dev/null 2>&1; el "bench $V $pass rc=$?"
  done
done
timeout -s KILL 100 sdpa-lab bench --suite fa --precision f16,bf16 --filter d64 --no-ceilings --out $R/fa.json > /dev/null 2>&1; el "bench fa d64 rc=$?"
python3 - <<'PY'
import json, os
R = os.environ['OUT'] + '/run177'
def L(n):
    try: d = json.load(open(f'{R}/{n}'))
    except Exception: return {}
    return {(r['case'], r['precision']): r['tflops'] for r in d['rows'] if r['status'] == 'ok' and r['implementation'] == 'fp8-sdpa'}
a = [L(f's2.b1.w4pogex_{p}.json') for p in (1, 2)]; b = [L(f's3.b1.w4pogex_{p}.json') for p in (1, 2)]; fa = L('fa.json')
rs = []
for k in sorted(a[0], key=lambda k: (k[1], k[0])):
    x, y = max(d.get(k, 0) for d in a), max(d.get(k, 0) for d in b)
    h = fa.get((k[0], 'f16' if k[1].endswith('f16') else 'bf16'))
    rs.append(y / x)
    print(f"{k[0]:18s} {k[1]:11s} s2 {a[0].get(k,0):6.1f}/{a[1].get(k,0):6.1f}  s3 {b[0].get(k,0):6.1f}/{b[1].get(k,0):6.1f}  s3/s2 {y / x:.3f}  16-bit {h or 0:6.1f}  s3/16 {y / h if h else 0:.3f}")
print(f"s3/s2 range {min(rs):.3f}-{max(rs):.3f}")
PY
