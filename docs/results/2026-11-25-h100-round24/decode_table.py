#!/usr/bin/env python3
"""Bench JSONs -> one line per (case, precision): median µs and GB/s of every backend, ours
over the best peer, % of the copy ceiling, and the paged rows over their contiguous twins.
Usage: decode_table.py bench.json [more.json ...]"""
import json, sys, collections
cells = collections.defaultdict(dict)
ceil = None
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f"{f}: unreadable ({e})"); continue
    for c in d.get('ceilings', []):
        if c.get('name') == 'copy':
            ceil = c['value']
    for r in d['rows']:
        key = (r['suite'], r['case'], r['precision'])
        name = r['backend'] if r['implementation'] == 'fp8-sdpa' else r['implementation'] + ':' + r['backend']
        if r.get('status') != 'ok' or not r.get('stats'):
            if not r.get('status', '').startswith('skipped'):
                cells[key][name] = (None, None, r.get('status', '')[:60])
            continue
        ok = (r.get('correctness') or {}).get('passed', True)
        cells[key][name] = (r['stats']['median_us'], r.get('gbps'), '' if ok else '!BAD')
print(f"copy ceiling: {ceil} GB/s" if ceil else "copy ceiling: not found")
for (suite, case, prec), b in sorted(cells.items()):
    ours = {k: v for k, v in b.items() if ':' not in k and v[0]}
    peers = {k: v for k, v in b.items() if ':' in k and v[0]}
    best = min(peers.items(), key=lambda kv: kv[1][0]) if peers else None
    parts = []
    for name, (us, gb, flag) in sorted(b.items()):
        if us is None:
            parts.append(f"{name}: {flag}"); continue
        g = f" {gb:.0f}GB/s" if gb else ""
        parts.append(f"{name}={us:.1f}us{g}{flag}")
    for name, (us, gb, _) in ours.items():
        if best:
            parts.append(f"[{name} / best peer {best[0]}: {best[1][0] / us:.2f}x]")
        if ceil and gb:
            parts.append(f"[{gb / ceil * 100:.0f}% of copy]")
    if '_page' in case:
        twin = (suite, case.split('_page')[0], prec)
        for name, (us, _, _) in ours.items():
            t = cells.get(twin, {}).get(name)
            if t and t[0]:
                parts.append(f"[paged/contiguous time {us / t[0]:.3f}]")
    print(f"{suite:7s} {case:28s} {prec:10s} " + "  ".join(parts))
