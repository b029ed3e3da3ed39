#!/bin/bash
# Round 29, run 162 (one GPU): issue 27, the mission shape with the key split (hopper.cu KSPLIT:
# 64-row tile, two consumer warpgroups on alternate key blocks, merged through shared memory).
# Run 161: the 64-row tile's block spends 8,900 cycles on 4 key blocks with 0.27 issued warps
# per scheduler and L2 at 10 %: one warpgroup's chain of blocks is the latency.
# Verify and sanitizers on the split tiles, then the mission suite (graph mode) with the default
# and both split tiles, two interleaved passes, peers in the first.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT/r
R=$OUT/r
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
S2=hopper.m64.n128.w12.s2.b1.w4oex; S4=hopper.m64.n128.w12.s4.b1.w4oex
timeout -s KILL 200 sdpa-lab verify --variant $S2 --variant $S4 --filter hopper --quick --seeds 2 --no-codec --json $R/v.json > $R/v.log 2>&1; el "verify split rc=$?"
grep "verify:" $R/v.log | tail -1; grep -iE "fail" $R/v.log | grep -v "^spec" | head -6
for S in $S2/f16/d64/full:memcheck $S2/f16/d64/full:racecheck $S4/bf16/d64/causal:racecheck $S2/f16/d128/causal:racecheck; do
  tool=${S#*:}; spec=${S%:*}
  timeout -s KILL 120 compute-sanitizer --tool $tool --error-exitcode 9 sdpa-lab verify --filter $spec --quick --seeds 1 --no-codec --json /tmp/s.json > $R/san.log 2>&1; el "$tool $spec rc=$?"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" $R/san.log | tail -2
done
for pass in 1 2; do
  P=""; [ $pass = 1 ] && P=--peers
  timeout -s KILL 120 sdpa-lab bench --suite mission --precision f16,bf16 $P --no-ceilings --out $R/def$pass.json > /dev/null 2>&1; el "bench default $pass rc=$?"
  timeout -s KILL 60 sdpa-lab bench --suite mission --precision f16,bf16 --variant $S2 --no-ceilings --out $R/s2_$pass.json > /dev/null 2>&1; el "bench s2 $pass rc=$?"
  timeout -s KILL 60 sdpa-lab bench --suite mission --precision f16,bf16 --variant $S4 --no-ceilings --out $R/s4_$pass.json > /dev/null 2>&1; el "bench s4 $pass rc=$?"
done
python3 - <<'PY'
import json, os
R = os.environ['OUT'] + '/r'
def L(n):
    try: d = json.load(open(f'{R}/{n}'))
    except Exception as e: return {}
    return {(r['case'], r['precision'], r['implementation'], r.get('backend','')): r['stats']['median_us'] for r in d['rows'] if r['status'] == 'ok'}
print(f"{'case':14s} {'prec':5s} {'default':>14s} {'split s2':>14s} {'split s4':>14s}  peers (pass 1)")
d1, d2 = L('def1.json'), L('def2.json')
for k in sorted(d1):
    if k[2] != 'fp8-sdpa': continue
    c = lambda n: '/'.join(f"{L(n+str(p)+'.json').get(k, float('nan')):.2f}" for p in (1, 2))
    peers = ' '.join(f"{kk[3] or kk[2]} {v:.2f}" for kk, v in d1.items() if kk[:2] == k[:2] and kk[2] != 'fp8-sdpa')
    print(f"{k[0]:14s} {k[1]:5s} {d1[k]:6.2f}/{d2.get(k, float('nan')):6.2f} {c('s2_'):>14s} {c('s4_'):>14s}  {peers}")
PY
cd $OUT && tar czf r162.tgz r && rm -rf r
