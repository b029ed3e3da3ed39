#!/bin/bash
# Polls run 164's detached job; prints the table and copies its outputs to $OUT when it is done.
R=/tmp/r164
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
python3 - <<'PY'
import json
R = '/tmp/r164'
def L(n):
    try: d = json.load(open(f'{R}/{n}'))
    except Exception: return {}
    return {(r['case'], r['precision']): r['tflops'] for r in d['rows'] if r['status'] == 'ok' and r['implementation'] == 'fp8-sdpa'}
fa = [L('fa1.json'), L('fa2.json')]; kv = [L('kv1.json'), L('kv2.json')]; kd = [L('kvdef1.json'), L('kvdef2.json')]
best = lambda ds, k: max([d.get(k) for d in ds if d.get(k)] or [float('nan')])
print(f"{'case':18s} {'prec':11s} {'16-bit':>7s} {'hopper kv':>9s} {'portable kv':>11s} {'hop/16':>7s} {'port/16':>7s} {'hop/port':>8s}")
for (c, p) in sorted(kd[0], key=lambda k: (k[1], k[0])):
    b = 'f16' if p.endswith('f16') else 'bf16'
    h, k, d = best(fa, (c, b)), best(kv, (c, p)), best(kd, (c, p))
    print(f"{c:18s} {p:11s} {h:7.1f} {k:9.1f} {d:11.1f} {k/h:7.3f} {d/h:7.3f} {k/d:8.3f}")
PY
mkdir -p $OUT/run164 && cp $R/*.json $R/*.log $R/*.gz $R/*.csv $R/log $OUT/run164/ 2>/dev/null
rm -f $OUT/run164/v.json
cd $OUT && tar czf r164.tgz run164 && rm -rf run164
