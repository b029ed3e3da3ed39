#!/usr/bin/env python3
"""Bench JSONs -> one line per (case, precision): TFLOPS of every backend, and each of ours
over cuDNN's. Usage: table.py bench.json [more.json ...]"""
import json, sys, collections
cells = collections.defaultdict(dict)
for f in sys.argv[1:]:
    try:
        rows = json.load(open(f))['rows']
    except Exception as e:
        print(f"{f}: unreadable ({e})"); continue
    for r in rows:
        if r.get('status') != 'ok' or r.get('tflops') is None:
            continue
        key = (r['case'], r['precision'])
        name = r['backend'] if r['implementation'] == 'fp8-sdpa' else r['implementation'] + ':' + r['backend']
        ok = (r.get('correctness') or {}).get('passed', True)
        cells[key][name] = (r['tflops'], ok)
for (case, prec), b in sorted(cells.items()):
    cud = next((v[0] for k, v in b.items() if 'cudnn' in k), None)
    parts = []
    for name, (tf, ok) in sorted(b.items()):
        ratio = f" ({tf / cud:.2f}x)" if cud and 'torch' not in name and 'cudnn' not in name else ""
        parts.append(f"{name}={tf:.0f}{'' if ok else '!BAD'}{ratio}")
    print(f"{case:20s} {prec:5s} " + "  ".join(parts))
