#!/bin/bash
# Polls run 167's detached job; prints the table and copies its outputs to $OUT when it is done.
R=/tmp/r167
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
python3 - <<'PY'
import json
R = '/tmp/r167'
def L(n, key='tflops'):
    try: d = json.load(open(f'{R}/{n}'))
    except Exception: return {}
    return {(r['case'], r['precision']): (r['tflops'] if key == 'tflops' else r['backend']) for r in d['rows'] if r['status'] == 'ok' and r['implementation'] == 'fp8-sdpa'}
kv, base, fa, r64, vb = L('kv.json'), L('base.json'), L('fa.json'), L('r64.json'), L('kv.json', 'b')
print(f"{'case':18s} {'prec':11s} {'16-bit':>7s} {'new':>7s} {'base':>7s} {'r64':>7s} {'new/16':>7s} {'new/base':>8s}  variant")
for (c, p) in sorted(kv, key=lambda k: (k[1], k[0])):
    b = 'f16' if p.endswith('f16') else 'bf16'
    h, n, o, x = fa.get((c, b)), kv[(c, p)], base.get((c, p)), r64.get((c, p))
    f = lambda v: f"{v:7.1f}" if v else "      -"
    print(f"{c:18s} {p:11s} {f(h)} {f(n)} {f(o)} {f(x)} {n / h if h else float('nan'):7.3f} {n / o if o else float('nan'):8.3f}  {vb.get((c, p), '')[:40]}")
PY
mkdir -p $OUT/run167 && cp $R/*.json $R/*.log $R/log $OUT/run167/ 2>/dev/null
rm -f $OUT/run167/v.json
cd $OUT && tar czf r167.tgz run167 && rm -rf run167
