#!/usr/bin/env python3
"""Run 122's tune folders -> the tables of the notes: for each run the evaluations, time,
best and the default's time; for the exhaustive decode space the true best and, per seed at
a budget of 20, the tuner's and random search's best over it. Usage: tune_table.py OUT"""
import csv, json, os, sys
out = sys.argv[1]

def log(path):
    rows = list(csv.DictReader(open(path))) if os.path.exists(path) else []
    return {r['variant']: float(r['full_us']) for r in rows if r['full_us']}, len(rows)

def gates(path):
    rows = list(csv.DictReader(open(path))) if os.path.exists(path) else []
    c = {}
    for r in rows:
        c[r['gate']] = c.get(r['gate'], 0) + 1
    return c

for name in ['dec8_all', 'dec16', 'hop']:
    d = os.path.join(out, name)
    try:
        t = json.load(open(os.path.join(d, 'topk.json')))
    except Exception as e:
        print(f"{name}: no topk.json ({e})"); continue
    timed, n = log(os.path.join(d, 'tune_log.csv'))
    rnd, nr = log(os.path.join(d, 'random_log.csv'))
    default = t.get('default')
    dus = timed.get(default) or rnd.get(default)
    best = t['topk'][0] if t.get('topk') else None
    print(f"{name}: {t['evaluations']} evaluations ({t.get('cached', 0)} cached) in {t['seconds']:.0f} s, "
          f"{t['valid_variants']} valid; gates {gates(os.path.join(d, 'tune_log.csv'))}")
    if best:
        print(f"  best {best['variant']} {best['median_us']:.2f} us; default {default} "
              f"{dus if dus is None else f'{dus:.2f} us'}" + (f"; best/default time {best['median_us'] / dus:.3f}" if dus else ""))
    for k in t['topk'][:5]:
        print(f"    {k['variant']:40s} {k['median_us']:.2f} us")

# The exhaustive space: every variant's time from both logs of the budget-120 run.
allv = {}
for f in ['tune_log.csv', 'random_log.csv']:
    allv.update(log(os.path.join(out, 'dec8_all', f))[0])
if allv:
    opt = min(allv.values())
    print(f"\nexhaustive decode fp8kv_f16 D128: {len(allv)} variants timed, best {opt:.2f} us "
          f"({min(allv, key=allv.get)})")
    print("seed  tuner best (x opt, evals to within 2%)   random best (x opt, evals to within 2%)")
    for s in range(6):
        try:
            t = json.load(open(os.path.join(out, f'dec8_b20_s{s}', 'topk.json')))
        except Exception:
            continue
        def fmt(curve):
            if not curve: return "-"
            b = curve[-1]
            if b is None: return "no timed candidate"
            hit = next((i + 1 for i, x in enumerate(curve) if x is not None and x <= 1.02 * opt), None)
            return f"{b:.2f} us ({b / opt:.3f}x, {hit if hit else '>' + str(len(curve))})"
        print(f"{s:4d}  {fmt(t.get('best_so_far_us')):40s} {fmt(t.get('random_best_so_far_us'))}")
