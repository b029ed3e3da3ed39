#!/bin/bash
# Polls run 181's detached job; prints the tables and copies its outputs to $OUT when done.
R=/tmp/r181
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
python3 - <<'PY'
import json, os
R = '/tmp/r181'
def rows(n):
    try: return json.load(open(f'{R}/{n}'))['rows']
    except Exception: return []
def tf(n, by_variant=False):
    out = {}
    for r in rows(n):
        if r['status'] != 'ok' or r['implementation'] != 'fp8-sdpa': continue
        k = (r['case'], r['backend']) if by_variant else r['case']
        out[k] = r['tflops']
    return out
print("fp8 d128 (TFLOPS, best of 2 passes)")
B = {}
for b in ('ship', 'bin', 'b2'):
    B[b] = {}
    for p in (1, 2):
        for k, v in tf(f'f8_{b}{p}.json').items(): B[b][k] = max(v, B[b].get(k, 0))
N = {}
for p in (1, 2):
    for k, v in tf(f'f8_n64{p}.json', True).items(): N[k] = max(v, N.get(k, 0))
cud = {r['case']: r['tflops'] for r in rows('fp8peers.json') if r['implementation'] == 'cudnn_fp8' and r['status'] == 'ok'}
for c in sorted(B['ship']):
    n64 = ' '.join(f"{k[1].split('.')[-1]} {v:.0f} ({v / B['ship'][c]:.3f})" for k, v in sorted(N.items()) if k[0] == c)
    print(f"  {c:18s} ship {B['ship'][c]:6.1f}  bin {B['bin'].get(c, 0):6.1f} ({B['bin'].get(c, 0) / B['ship'][c]:.3f})  b2 {B['b2'].get(c, 0):6.1f} ({B['b2'].get(c, 0) / B['ship'][c]:.3f})  n64 {n64}  cudnn {cud.get(c, 0):.0f}")
print("fp8 suite, bin, with peers (TFLOPS)")
for r in sorted(rows('fp8peers.json'), key=lambda r: (r['case'], r['implementation'])):
    if r['status'] == 'ok' and r['implementation'] in ('fp8-sdpa', 'cudnn_fp8', 'fa3'):
        print(f"  {r['case']:18s} {r['implementation']:10s} {r['backend'][:34]:34s} {r['tflops']:7.1f}")
print("mission (graph, median us, best of 2)")
M = {}
for p in (1, 2):
    for r in rows(f'mis{p}.json'):
        if r['status'] != 'ok': continue
        k = (r['case'], r['backend'])
        M[k] = min(r['stats']['median_us'], M.get(k, 1e9))
for k in sorted(M): print(f"  {k[0]:14s} {k[1]:36s} {M[k]:7.2f}")
PY
mkdir -p $OUT/run181 && cp $R/*.json $R/*.log $R/log $OUT/run181/ 2>/dev/null
rm -f $OUT/run181/vbin.json
cd $OUT && tar czf r181.tgz run181 && rm -rf run181
