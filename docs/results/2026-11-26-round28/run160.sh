#!/bin/bash
# Round 28, run 160 (one GPU): issue 27. Run 158 showed the paged rows run the default 64-key
# decode tile while the contiguous small grids run round 26's tuned 128-key tiles: the paged gap
# at B4 128k mixes two tiles. The tuner on the small-paged bucket (fp16, FP8-KV), verify and
# memcheck of the 128-key tiles on every class they serve (paged shapes included), and the
# hkv8 decode rows (contiguous and page 64) with each 128-key tile and with the defaults.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
F=decode.m16.n128.w4.s3.b1.cex; K=decode.m16.n128.w4.s4.b2.cex
for p in f16 fp8kv_f16; do
  timeout -s KILL 150 sdpa-lab tune --family decode --shape-class decode --bucket small-paged --precision $p --budget 12 --seed 0 --out $OUT/tune_$p > $OUT/tune_$p.log 2>&1; el "tune small-paged $p rc=$?"
  tail -4 $OUT/tune_$p.log
done
timeout -s KILL 150 sdpa-lab verify --variant $F --variant $K --filter decode --quick --seeds 2 --no-codec --json $OUT/v.json > $OUT/v.log 2>&1; el "verify n128 tiles rc=$?"
grep "verify:" $OUT/v.log | tail -1; grep -iE "fail" $OUT/v.log | grep -v "^spec" | head -4
for S in $F:f16/d128 $K:fp8kv_f16/d128; do
  timeout -s KILL 120 compute-sanitizer --tool memcheck --error-exitcode 9 sdpa-lab verify --variant ${S%%:*} --filter ${S#*:} --quick --seeds 1 --no-codec --json /tmp/s.json > $OUT/san.log 2>&1; el "memcheck $S rc=$?"
  grep -E "ERROR SUMMARY|verify:" $OUT/san.log | tail -2
done
timeout -s KILL 100 sdpa-lab bench --suite decode --precision f16,fp8kv_f16 --filter hkv8 --no-ceilings --out $OUT/def.json > /dev/null 2>&1; el "bench defaults rc=$?"
timeout -s KILL 100 sdpa-lab bench --suite decode --precision f16 --filter hkv8 --variant $F --no-ceilings --out $OUT/n128f.json > /dev/null 2>&1; el "bench $F rc=$?"
timeout -s KILL 100 sdpa-lab bench --suite decode --precision fp8kv_f16 --filter hkv8 --variant $K --no-ceilings --out $OUT/n128k.json > /dev/null 2>&1; el "bench $K rc=$?"
python3 - <<'PY'
import json,os
o=os.environ['OUT']
def L(n): return {(r['case'],r['precision']):(r['stats']['median_us'],r['backend']) for r in json.load(open(f'{o}/{n}'))['rows'] if r['implementation']=='fp8-sdpa' and r['status']=='ok'}
d=L('def.json'); t={**L('n128f.json'),**L('n128k.json')}
for k in sorted(d):
    if 'page' in k[0]:
        c=(k[0].split('_page')[0],k[1])
        if c in d and k in t and c in t:
            print(f"{k[0]:28s} {k[1]:10s} default paged/contig {d[k][0]/d[c][0]:.3f} ({d[k][0]:.1f}/{d[c][0]:.1f})  n128 paged/contig {t[k][0]/t[c][0]:.3f} ({t[k][0]:.1f}/{t[c][0]:.1f})")
PY
