#!/usr/bin/env python3
"""FP8-KV against 16-bit, per case: bench JSONs (any number; repeated passes are averaged by
median) -> one line per (case, 16-bit type): the 16-bit default's TFLOPS and every FP8-KV
backend's, each over the 16-bit default. Usage: kvtable.py a.json b.json ..."""
import json, sys, collections, statistics
cells = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    try:
        rows = json.load(open(f))['rows']
    except Exception as e:
        print(f"{f}: unreadable ({e})"); continue
    for r in rows:
        if r.get('implementation') != 'fp8-sdpa':
            continue
        p = r['precision'].replace('fp8_kv', 'fp8kv')
        base = {'f16': 'f16', 'bf16': 'bf16', 'fp8kv_f16': 'f16', 'fp8kv_bf16': 'bf16'}.get(p)
        if base is None:
            continue
        ok = r.get('status') == 'ok' and (r.get('correctness') or {}).get('passed', True)
        name = ('16bit:' if p == base else 'kv8:') + r['backend'].replace('hopper.m128.n128.w12.s2.b1.', 'H.')[:28]
        cells[(r['case'], base)][name].append(r['tflops'] if ok and r.get('tflops') else float('nan'))
for (case, base), b in sorted(cells.items()):
    ref = [statistics.median(v) for k, v in b.items() if k.startswith('16bit:')]
    ref = ref[0] if ref else None
    parts = []
    for name, v in sorted(b.items()):
        m = statistics.median(v)
        parts.append(f"{name}={m:.0f}" + (f"({m / ref:.2f})" if ref and not name.startswith('16bit:') else ""))
    print(f"{case:18s} {base:4s} " + "  ".join(parts))
