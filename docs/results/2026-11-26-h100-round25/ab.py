#!/usr/bin/env python3
"""A/B bench JSONs of the same cases from several binaries -> TFLOPS per case, one column per
file, and each column over the first. Usage: ab.py first.json second.json ..."""
import json, sys
cols = []
for f in sys.argv[1:]:
    try:
        rows = json.load(open(f))['rows']
    except Exception as e:
        print(f"{f}: unreadable ({e})"); rows = []
    cols.append({(r['case'], r['precision']): r['tflops'] for r in rows
                 if r.get('status') == 'ok' and r.get('tflops') and r['implementation'] == 'fp8-sdpa'})
keys = sorted(set().union(*cols)) if cols else []
print("case                 prec  " + "  ".join(f.split('/')[-1][:16].rjust(16) for f in sys.argv[1:]))
for k in keys:
    base = cols[0].get(k)
    cells = []
    for c in cols:
        v = c.get(k)
        cells.append(f"{v:7.0f}" + (f" ({v / base:.3f})" if v and base else "        ") if v else " " * 16)
    print(f"{k[0]:20s} {k[1]:5s} " + "  ".join(cells))
