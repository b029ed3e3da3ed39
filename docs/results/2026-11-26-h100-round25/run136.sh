#!/bin/bash
# Round 25, run 136: issue 26, two predict-change-measure rounds after step (d), interleaved
# A/B, f16, two passes each:
#  (1) D128 non-causal S 4k / 16k: FA3's 176-key tile, persistent with ping-pong (O stored from
#      registers: with 176 keys the O tile no longer fits) against the shipped 128-key one;
#  (2) D64 causal S 4k: the 128-row persistent ping-pong tile against the shipped 192-row one.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
for rep in 1 2; do
  for v in hopper.m128.n128.w12.s2.b1.w4pogex hopper.m128.n176.w12.s2.b1.w4pogex; do
    for f in d128_s4k d128_s16k; do
      timeout -s KILL 60 sdpa-lab bench --suite fa --quick --precision f16 --filter $f --variant $v --no-ceilings --out $OUT/ab__${v}__${f}__$rep.json > /tmp/ab.log 2>&1 || echo "rc=$? $v $f"
    done
  done
  for v in hopper.m192.n128.w16.s2.b1.w4poex hopper.m128.n128.w12.s2.b1.w4pogex; do
    timeout -s KILL 60 sdpa-lab bench --suite fa --quick --precision f16 --filter d64_s4k_causal --variant $v --no-ceilings --out $OUT/ab__${v}__d64c__$rep.json > /tmp/ab.log 2>&1 || echo "rc=$? $v"
  done
  el "rep $rep"
done
python3 - $OUT <<'PY'
import json, sys, glob, collections
d = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + '/ab__*.json'):
    for r in json.load(open(f))['rows']:
        if r.get('status') == 'ok' and r.get('tflops') and r['implementation'] == 'fp8-sdpa':
            d[(r['case'], r['backend'])].append(round(r['tflops'], 1))
for k in sorted(d):
    print(f"{k[0]:18s} {k[1]:38s} {d[k]}")
PY
