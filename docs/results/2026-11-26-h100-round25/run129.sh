#!/bin/bash
# Round 25, run 129: the A/B of run 128 again, interleaved (old, stepd, skip, three times
# each, on the cells the two changes touch, D256 as the control), since run 128's one pass per
# binary moved untouched cells by up to 10 %.
export PATH=$PWD/.device/bin:$PWD/.ab:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }

for rep in 1 2 3; do
  for bin in sdpa-lab-old sdpa-lab-stepd sdpa-lab; do
    for f in d128_s1k _s4k; do  # d128 S 1k (both), every head dim at S 4k (both)
      timeout 60 $bin bench --suite fa --quick --precision f16 --filter $f --no-ceilings --out $OUT/ab__${bin}__${f}__$rep.json > /tmp/ab.log 2>&1 || echo "ab $bin $f rc=$?"
    done
  done
  el "rep $rep"
done
python3 - $OUT <<'PY'
import json, sys, glob, statistics, collections
d = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + '/ab_*.json'):
    b = f.split('/')[-1].split('__')[1]
    for r in json.load(open(f))['rows']:
        if r.get('status') == 'ok' and r.get('tflops'):
            d[(r['case'], b)].append(r['tflops'])
cases = sorted({c for c, _ in d})
print(f"{'case':20s} {'old':>14s} {'stepd':>14s} {'skip':>14s}   (median TFLOPS of 3; min-max)")
for c in cases:
    cols = []
    base = statistics.median(d[(c, 'sdpa-lab-old')]) if d[(c, 'sdpa-lab-old')] else None
    for b in ['sdpa-lab-old', 'sdpa-lab-stepd', 'sdpa-lab']:
        v = d[(c, b)]
        if not v: cols.append(' ' * 14); continue
        m = statistics.median(v)
        cols.append(f"{m:5.0f} {m / base:.3f} [{min(v):.0f}-{max(v):.0f}]")
    print(f"{c:20s} " + "  ".join(cols))
PY
