#!/bin/bash
# Polls run 163's detached job; prints the table and copies its outputs to $OUT when it is done.
R=/tmp/r163
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
python3 - <<'PY'
import json, os
R = '/tmp/r163'
def L(n):
    try: d = json.load(open(f'{R}/{n}'))
    except Exception: return {}
    return {(r['case'], r['precision']): r['tflops'] for r in d['rows'] if r['status'] == 'ok' and r['implementation'] == 'fp8-sdpa'}
fa = L('fa.json'); fa2 = L('fa2.json'); kd = L('kvdef.json')
V = ['hopper.m128.n128.w12.s2.b1.w4pogex', 'hopper.m128.n128.w12.s2.b1.w4ogex', 'hopper.m128.n128.w12.s2.b1.w4oex']
kv = [L(f'kv_{v}.json') for v in V]
print(f"{'case':18s} {'kv prec':10s} {'16-bit':>13s} {'kv port':>8s} {'pog':>7s} {'og':>7s} {'o':>7s} {'best/16':>8s} {'port/16':>8s}")
for (c, p) in sorted(kd):
    b = 'f16' if p.endswith('f16') else 'bf16'
    h = [x.get((c, b)) for x in (fa, fa2)]
    hv = max([x for x in h if x] or [float('nan')])
    vals = [x.get((c, p)) for x in kv]
    best = max([x for x in vals if x] or [float('nan')])
    f = lambda x: f"{x:7.1f}" if x else "      -"
    print(f"{c:18s} {p:10s} {f(h[0])}/{f(h[1]).strip():>5s} {f(kd[(c,p)]):>8s} {f(vals[0])} {f(vals[1])} {f(vals[2])} {best/hv:8.3f} {kd[(c,p)]/hv:8.3f}")
PY
mkdir -p $OUT/run163 && cp $R/*.json $R/*.log $R/*.gz $R/*.csv $R/log $OUT/run163/ 2>/dev/null
rm -f $OUT/run163/v.json
cd $OUT && tar czf r163.tgz run163 && rm -rf run163
