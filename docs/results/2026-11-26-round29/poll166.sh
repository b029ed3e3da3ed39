#!/bin/bash
# Polls run 166's detached job; prints the table and copies its outputs to $OUT when it is done.
R=/tmp/r166
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
python3 - <<'PY'
import json
R = '/tmp/r166'
def L(n):
    try: d = json.load(open(f'{R}/{n}'))
    except Exception: return {}
    return {(r['case'], r['precision']): r['tflops'] for r in d['rows'] if r['status'] == 'ok' and r['implementation'] == 'fp8-sdpa'}
fa0 = L('fa.json'); fa2 = L('fa2.json'); fa = {k: max(v, fa2.get(k, 0)) for k, v in fa0.items()}; kv = L('kv.json')
import json as J
back = {(r['case'], r['precision']): r['backend'] for r in J.load(open(f'{R}/kv.json'))['rows'] if r['status'] == 'ok'} if kv else {}
print(f"{'case':18s} {'prec':11s} {'16-bit':>7s} {'fp8kv':>7s} {'kv/16':>6s}  variant")
for (c, p) in sorted(kv, key=lambda k: (k[1], k[0])):
    b = 'f16' if p.endswith('f16') else 'bf16'
    h = fa.get((c, b))
    print(f"{c:18s} {p:11s} {h or float('nan'):7.1f} {kv[(c, p)]:7.1f} {(kv[(c, p)] / h) if h else float('nan'):6.3f}  {back.get((c, p), '')}")
PY
mkdir -p $OUT/run166 && cp $R/*.json $R/*.log $R/*.gz $R/*.csv $R/log $OUT/run166/ 2>/dev/null
rm -f $OUT/run166/v.json
cd $OUT && tar czf r166.tgz run166 && rm -rf run166
