#!/usr/bin/env python3
"""verify.json -> per spec: runs, failures, max relative L2 and max |err| against the
dequantized reference, and the first failure. Usage: vsum.py verify.json [filter]"""
import json, sys, collections
d = json.load(open(sys.argv[1]))
filt = sys.argv[2] if len(sys.argv) > 2 else ''
agg = collections.OrderedDict()
for r in d['runs']:
    if filt not in r['spec']:
        continue
    a = agg.setdefault(r['spec'], {'n': 0, 'fail': 0, 'l2': 0.0, 'max': 0.0, 'first': None})
    a['n'] += 1
    if r['failures']:
        a['fail'] += 1
        a['first'] = a['first'] or (r['case']['shape'], r['case']['causal'], r['failures'][0][:160])
    v = (r.get('verdict') or {}).get('vs_dequantized') or {}
    a['l2'] = max(a['l2'], v.get('rel_l2') or 0.0)
    a['max'] = max(a['max'], v.get('max_abs') or 0.0)
for k, a in agg.items():
    print(f"{k:55s} runs {a['n']:3d} fail {a['fail']:3d} max relL2 {a['l2']:.2e} max|err| {a['max']:.2e}")
    if a['first']:
        print("    first failure:", a['first'])
print(d.get('summary'))
