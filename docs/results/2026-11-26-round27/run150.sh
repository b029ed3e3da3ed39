#!/bin/bash
# Round 27, run 150 (one GPU): issue 31, variable-length batches on the Hopper family
# (SDPA_VARLEN: tensor maps over the packed tensors, the scheduler cuts each sequence out,
# O stored from registers). Verify every registered Hopper spec, dense and varlen shapes
# (--quick, two seeds); the varlen GPU test binary; memcheck and racecheck on the two Hopper
# varlen defaults (their verify runs include the varlen shapes); a same-run fa bench of the
# dense Hopper defaults, this build against the base build (e7dac06), to show the dense
# kernels unchanged in speed.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout -s KILL 300 sdpa-lab verify --filter hopper --quick --seeds 2 --no-codec --json $OUT/verify.json > $OUT/verify.log 2>&1; el "verify hopper rc=$?"
grep "verify:" $OUT/verify.log; grep "^FAIL" $OUT/verify.log | head -10
SDPA_NVRTC_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib timeout -s KILL 200 .device/tests/gpu_varlen-test --include-ignored > $OUT/gpu_varlen.log 2>&1; el "gpu_varlen tests rc=$?"; grep "test result" $OUT/gpu_varlen.log
for S in hopper.m128.n128.w12.s2.b1.w4pogex/f16/d128/full hopper.m128.n128.w12.s2.b1.w4oex/bf16/d128/causal hopper.m128.n128.w12.s2.b1.w4pogex/bf16/d64/causal; do
  for tool in memcheck racecheck; do
    timeout -s KILL 200 compute-sanitizer --tool $tool --error-exitcode 9 sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/s.json > /tmp/san.log 2>&1; el "$tool $S rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" /tmp/san.log | tail -2
  done
done
for pass in 1 2; do
  timeout -s KILL 150 .device/base/sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $OUT/base$pass.json > /dev/null 2>&1; el "bench base pass $pass rc=$?"
  timeout -s KILL 150 sdpa-lab bench --suite fa --quick --precision f16 --no-ceilings --out $OUT/new$pass.json > /dev/null 2>&1; el "bench new pass $pass rc=$?"
done
python3 - $OUT <<'PY'
import json, sys, os
o = sys.argv[1]
def load(n):
    return {(r['case'], r['implementation']): r['tflops'] for r in json.load(open(os.path.join(o, n)))['rows'] if r['status'] == 'ok'}
b = [load(f'base{i}.json') for i in (1, 2)]; n = [load(f'new{i}.json') for i in (1, 2)]
print(f"{'case':22s} {'base':>14s} {'new':>14s} ratio")
for k in sorted(b[0]):
    if k[1] != 'fp8-sdpa': continue
    bb = [x.get(k) for x in b]; nn = [x.get(k) for x in n]
    if None in bb + nn: continue
    print(f"{k[0]:22s} {bb[0]:6.1f} {bb[1]:6.1f} {nn[0]:6.1f} {nn[1]:6.1f} {max(nn)/max(bb):.3f}")
PY
