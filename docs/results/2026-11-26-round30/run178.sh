#!/bin/bash
# Round 30, run 178 (one GPU): issue 28 item 2, the mechanism left open by runs 171-177. ncu
# source counters of the shipped FP8-KV persistent tile and the 16-bit one at D128 S 4k (fp16,
# the fp8 suite's case): where the warps' stall samples sit (the consumers' waits for K and V,
# the wgmma waits, the producer's decode), and the shared-memory wavefronts beyond ideal
# (bank conflicts) of each store and load. Landing build (cfb6a32); the FP8-KV kernel is round
# 29's.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT/run178
R=$OUT/run178
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name --format=csv,noheader
N="ncu --clock-control none --cache-control none -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SourceCounters"
PO=hopper.m128.n128.w12.s2.b1.w4pogex
# (As run, the f16 half also used the fp8 suite, which has no f16 rows, and was redone by hand
# with the fa suite, as below.)
for p in fp8kv_f16 f16; do
  S=fp8; [ $p = f16 ] && S=fa
  timeout -s KILL 150 $N -o /tmp/$p sdpa-lab bench --suite $S --quick --precision $p --filter d128_s4k --variant $PO --no-ceilings --iters 100 --out /tmp/x.json > $R/$p.log 2>&1; el "ncu $p rc=$?"
  ncu --import /tmp/$p.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $R/${p}_sass.csv.gz
  ncu --import /tmp/$p.ncu-rep --page details --csv > $R/$p.csv 2>/dev/null
done
python3 - <<'PY'
import csv, gzip, io, os, re, collections
R = os.environ['OUT'] + '/run178'
for p in ['fp8kv_f16', 'f16']:
    rows = list(csv.reader(io.TextIOWrapper(gzip.open(f'{R}/{p}_sass.csv.gz'), 'utf-8')))
    hdr = rows[1]; body = [r for r in rows[2:] if len(r) == len(hdr)]
    ix = {h: i for i, h in enumerate(hdr)}
    S = lambda r, k: float(r[ix[k]] or 0) if k in ix else 0.0
    tot = sum(S(r, 'Warp Stall Sampling (All Samples)') for r in body)
    by = collections.Counter()
    for r in body:
        op = r[ix['Source']].strip().split()
        op = [t for t in op if not t.startswith('@')]
        by[op[0].split('.')[0] if op else '?'] += S(r, 'Warp Stall Sampling (All Samples)')
    print(f"== {p}: {tot:.0f} stall samples; by opcode: " + ', '.join(f"{k} {v / tot:.1%}" for k, v in by.most_common(10)))
    top = sorted(body, key=lambda r: -S(r, 'Warp Stall Sampling (All Samples)'))[:14]
    for r in top:
        print(f"   {r[ix['Address']]:>6s} {S(r, 'Warp Stall Sampling (All Samples)') / tot:6.1%}  {r[ix['Source']].strip()[:90]}")
    ex = sum(S(r, 'L1 Wavefronts Shared Excessive') for r in body); al = sum(S(r, 'L1 Wavefronts Shared') for r in body)
    print(f"   shared wavefronts {al:.0f}, excessive {ex:.0f} ({ex / al if al else 0:.1%})")
    for r in sorted(body, key=lambda r: -S(r, 'L1 Wavefronts Shared Excessive'))[:5]:
        if S(r, 'L1 Wavefronts Shared Excessive') > 0:
            print(f"     {r[ix['Address']]:>6s} excessive {S(r, 'L1 Wavefronts Shared Excessive'):.0f} of {S(r, 'L1 Wavefronts Shared'):.0f}  {r[ix['Source']].strip()[:70]}")
    d = list(csv.reader(open(f'{R}/{p}.csv')))
    h = d[0]; im, iv = h.index('Metric Name'), h.index('Metric Value')
    for r in d[1:]:
        if r[im] in ('Duration', 'Compute (SM) Throughput', 'Issue Slots Busy', 'Warp Cycles Per Issued Instruction', 'No Eligible'):
            print(f"   {r[im]}: {r[iv]}")
PY
