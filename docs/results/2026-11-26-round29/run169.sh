#!/bin/bash
# Round 29, run 169 (one GPU): issue 28 item 2, the register split at D128: two passes' loads in
# flight with the producer at 56 registers (consumers 224, the build in .device/bin) against the
# shipped four passes at 64 (consumers 216, .device/ship, commit 693b157). Verify the D128 tiles,
# then the fp8 suite's D128 FP8-KV rows on the persistent tile, two interleaved passes.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT/r
R=$OUT/r
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name --format=csv,noheader
PO=hopper.m128.n128.w12.s2.b1.w4pogex
timeout -s KILL 120 sdpa-lab verify --variant $PO --filter fp8kv_ --quick --seeds 2 --no-codec --json /tmp/v.json > $R/v.log 2>&1; el "verify rc=$?"
grep "verify:" $R/v.log | tail -1
for pass in 1 2; do
  for b in bin ship; do
    timeout -s KILL 120 .device/$b/sdpa-lab bench --suite fp8 --precision fp8kv_f16,fp8kv_bf16 --filter d128 --variant $PO --no-ceilings --out $R/${b}$pass.json > /dev/null 2>&1; el "bench $b pass $pass rc=$?"
  done
done
python3 - <<'PY'
import json, os
R = os.environ['OUT'] + '/r'
def L(n):
    d = json.load(open(f'{R}/{n}'))
    return {(r['case'], r['precision']): r['tflops'] for r in d['rows'] if r['status'] == 'ok' and r['implementation'] == 'fp8-sdpa'}
b = [L('bin1.json'), L('bin2.json')]; s = [L('ship1.json'), L('ship2.json')]
rs = []
for k in sorted(b[0], key=lambda k: (k[1], k[0])):
    bb, ss = max(x[k] for x in b), max(x[k] for x in s); rs.append(bb / ss)
    print(f"{k[0]:18s} {k[1]:11s} b2@56 {b[0][k]:6.1f}/{b[1][k]:6.1f}  shipped {s[0][k]:6.1f}/{s[1][k]:6.1f}  best ratio {bb/ss:.3f}")
print(f"ratio range {min(rs):.3f}-{max(rs):.3f}")
PY
cd $OUT && tar czf r169.tgz r && rm -rf r
