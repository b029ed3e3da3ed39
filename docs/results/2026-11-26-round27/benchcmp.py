# Same-run comparison of two builds' bench JSONs (two passes each): best of the passes per row.
# Usage: python3 benchcmp.py DIR   (reads base1.json base2.json new1.json new2.json)
import json, os, sys
o = sys.argv[1]
def load(n):
    return {r['case']: r['tflops'] for r in json.load(open(os.path.join(o, n)))['rows']
            if r['status'] == 'ok' and r['implementation'] == 'fp8-sdpa'}
b = [load(f'base{i}.json') for i in (1, 2)]
n = [load(f'new{i}.json') for i in (1, 2)]
print(f"{'case':22s} {'base TFLOPS':>14s} {'new TFLOPS':>14s}  new/base")
for k in sorted(b[0]):
    bb = [x.get(k) for x in b]; nn = [x.get(k) for x in n]
    if None in bb + nn:
        continue
    print(f"{k:22s} {bb[0]:6.1f} {bb[1]:6.1f}  {nn[0]:6.1f} {nn[1]:6.1f}  {max(nn) / max(bb):.3f}")
