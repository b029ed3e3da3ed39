#!/usr/bin/env python3
"""Summarize bench JSONs in a folder: mean TFLOPS per (case, precision, backend) over files."""
import json, sys, os, collections
d = sys.argv[1]
acc = collections.defaultdict(list)
for f in sorted(os.listdir(d)):
    if not f.endswith('.json') or not f.startswith('b_'):
        continue
    try:
        rows = json.load(open(os.path.join(d, f)))['rows']
    except Exception as e:
        print(f"{f}: unreadable ({e})"); continue
    for r in rows:
        if r.get('implementation') != 'fp8-sdpa' or r.get('status') != 'ok':
            continue
        acc[(r['case'], r['precision'], r['backend'])].append(r['tflops'])
for (c, p, b), v in sorted(acc.items()):
    print(f"{c:22s} {p:12s} {b:40s} n={len(v)} mean={sum(v)/len(v):7.1f} [{' '.join(f'{x:.1f}' for x in v)}]")
