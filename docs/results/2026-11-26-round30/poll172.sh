#!/bin/bash
# Polls run 172's detached job; prints the tables and copies its outputs to $OUT when done.
R=/tmp/r172
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
python3 - <<'PY'
import json
R = '/tmp/r172'
def L(n, f='median_us', impl='fp8-sdpa'):
    try: d = json.load(open(f'{R}/{n}'))
    except Exception: return {}
    out = {}
    for r in d['rows']:
        if r['status'] != 'ok': continue
        if impl and r['implementation'] != impl: continue
        v = r['stats']['median_us'] if f == 'median_us' else r[f]
        k = (r['case'], r['precision']) if impl else (r['case'], r['precision'], r['implementation'], r.get('backend', ''))
        out[k] = v
    return out
def best(pre, b): 
    xs = [L(f'{pre}_{b}{p}.json') for p in (1, 2)]
    return {k: min(x[k] for x in xs if k in x) for k in xs[0]}
print("mission suite (graph mode, median us, best of 2 passes)")
nb, sb = best('mis', 'bin'), best('mis', 'ship')
peers = L('mis_ship1.json', impl=None)
for k in sorted(nb):
    pk = ' '.join(f"{kk[3] or kk[2]} {v:.2f}" for kk, v in peers.items() if kk[:2] == k and kk[2] != 'fp8-sdpa')
    print(f"  {k[0]:14s} {k[1]:5s} pdl {nb[k]:7.2f}  ship {sb.get(k, float('nan')):7.2f}  ratio {nb[k] / sb[k]:.3f}  | {pk}")
print("decode hkv8 (median us, best of 2)")
nb, sb = best('dec', 'bin'), best('dec', 'ship')
for k in sorted(nb):
    print(f"  {k[0]:30s} {k[1]:10s} pdl {nb[k]:8.2f}  ship {sb.get(k, float('nan')):8.2f}  ratio {nb[k] / sb[k]:.3f}")
print("fa d128 f16, persistent tile (TFLOPS, best of 2)")
T = {b: {} for b in ('bin', 'ship', 'r216')}
for b in T:
    for p in (1, 2):
        for k, v in L(f'fa_{b}{p}.json', 'tflops').items(): T[b][k] = max(v, T[b].get(k, 0))
for k in sorted(T['bin']):
    print(f"  {k[0]:18s} pdl {T['bin'][k]:6.1f}  ship {T['ship'].get(k, 0):6.1f}  r216 {T['r216'].get(k, 0):6.1f}  pdl/ship {T['bin'][k] / T['ship'][k]:.3f}  r216/pdl {T['r216'].get(k, 0) / T['bin'][k]:.3f}")
PY
mkdir -p $OUT/run172 && cp $R/*.json $R/*.log $R/log $OUT/run172/ 2>/dev/null
rm -f $OUT/run172/v.json
cd $OUT && tar czf r172.tgz run172 && rm -rf run172
