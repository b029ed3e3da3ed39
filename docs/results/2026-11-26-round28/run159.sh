#!/bin/bash
# Round 28, run 159 (one GPU): issue 28, part of P's exponentials on the FMA pipe (exp2_poly):
# one 8-key group in 4 (.device/exp4) or in 8 (.device/exp8) against this round's shipped kernel
# (.device/base, b062cf3). Verify of every Hopper FP8 tile with exp4 and exp8, then the fp8 suite
# (no peers; cuDNN's figures are run 153's), two interleaved passes.
export SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT
V="--variant hopper.m128.n128.w12.s2.b1.w4pogex --variant hopper.m128.n128.w12.s2.b1.w4oex --variant hopper.m128.n128.w12.s2.b1.w4ogex --variant hopper.m128.n64.w12.s3.b1.w4pgex --variant hopper.m128.n64.w12.s3.b1.w4gex"
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
for x in exp4 exp8; do
  timeout -s KILL 150 .device/$x/sdpa-lab verify $V --filter /fp8/ --quick --seeds 2 --no-codec --json $OUT/v_$x.json > $OUT/v_$x.log 2>&1; el "verify $x rc=$?"
  grep "verify:" $OUT/v_$x.log | tail -1; grep -iE "fail" $OUT/v_$x.log | grep -v "^spec" | head -4
done
for pass in 1 2; do
  for x in base exp4 exp8; do
    timeout -s KILL 100 .device/$x/sdpa-lab bench --suite fp8 --quick --precision fp8 --no-ceilings --out $OUT/${x}_$pass.json > /dev/null 2>&1; el "bench $x $pass rc=$?"
  done
done
python3 - <<'PY'
import json,os
o=os.environ['OUT']
def L(n): return {r['case']:(r['tflops'],r['correctness']['rel_l2']) for r in json.load(open(f'{o}/{n}'))['rows'] if r['implementation']=='fp8-sdpa' and r['status']=='ok'}
R={x:[L(f'{x}_{p}.json') for p in (1,2)] for x in ('base','exp4','exp8')}
best=lambda x,k: max(d[k][0] for d in R[x] if k in d)
print(f"{'case':18s} {'base':>6s} {'exp4':>6s} {'exp8':>6s}  exp4/b exp8/b  relL2 b/e4/e8")
for k in sorted(R['base'][0]):
    b,e4,e8=best('base',k),best('exp4',k),best('exp8',k)
    print(f"{k:18s} {b:6.0f} {e4:6.0f} {e8:6.0f}  {e4/b:.3f}  {e8/b:.3f}  {R['base'][0][k][1]:.4f}/{R['exp4'][0][k][1]:.4f}/{R['exp8'][0][k][1]:.4f}")
PY
