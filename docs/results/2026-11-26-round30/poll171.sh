#!/bin/bash
# Polls run 171's detached job; prints the table and copies its outputs to $OUT when it is done.
R=/tmp/r171
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
python3 - <<'PY'
import json
R = '/tmp/r171'
def L(n):
    try: d = json.load(open(f'{R}/{n}'))
    except Exception: return {}
    return {(r['case'], r['precision']): r['tflops'] for r in d['rows'] if r['status'] == 'ok' and r['implementation'] == 'fp8-sdpa'}
new, ship, pf, fa = L('new.json'), L('ship.json'), L('pf.json'), L('fa.json')
print(f"{'case':18s} {'prec':11s} {'16-bit':>7s} {'new':>7s} {'ship':>7s} {'pf':>7s} {'new/16':>7s} {'new/ship':>8s} {'pf/new':>7s}")
for (c, p) in sorted(new, key=lambda k: (k[1], k[0])):
    b = 'f16' if p.endswith('f16') else 'bf16'
    h, n, o, x = fa.get((c, b)), new[(c, p)], ship.get((c, p)), pf.get((c, p))
    f = lambda v: f"{v:7.1f}" if v else "      -"
    r = lambda a, b: f"{a / b:7.3f}" if a and b else "      -"
    print(f"{c:18s} {p:11s} {f(h)} {f(n)} {f(o)} {f(x)} {r(n, h)} {r(n, o):>8s} {r(x, n)}")
PY
mkdir -p $OUT/run171 && cp $R/*.json $R/*.log $R/log $OUT/run171/ 2>/dev/null
rm -f $OUT/run171/v.json $OUT/run171/vp.json
cd $OUT && tar czf r171.tgz run171 && rm -rf run171
