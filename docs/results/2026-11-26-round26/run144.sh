#!/bin/bash
# Round 26, run 144 (one GPU): issue 27's mission shape (B2 H8 S512 D64, graph mode, 7.9 us on
# the portable tile against cuDNN's ~9.4). Prediction: the Hopper kernel with ONE consumer
# warpgroup (64-row tiles; the rules allowed 2-3) puts 128 blocks on 132 SMs where the 128-row
# tiles made 64, and its TMA ring and wgmma cut the per-block time: about 5-6 us. Verify the
# candidates, then the mission suite with the shipped defaults and the candidates, two passes,
# peers in the first.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name --format=csv,noheader
A=hopper.m64.n128.w8.s2.b1.w4oex; B=hopper.m64.n64.w8.s4.b1.w4oex; C=hopper.m64.n128.w8.s3.b1.w4oex
timeout -s KILL 200 sdpa-lab verify --variant $A --variant $B --variant $C --quick --seeds 2 --no-codec --json $OUT/verify.json > $OUT/verify.log 2>&1; el "verify rc=$?"
grep "verify:" $OUT/verify.log
timeout -s KILL 100 compute-sanitizer --tool racecheck --error-exitcode 9 sdpa-lab verify --variant $A --filter f16/d64/causal --quick --seeds 1 --no-codec --json /tmp/s.json > /tmp/san.log 2>&1; el "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|verify:" /tmp/san.log | tail -2
timeout -s KILL 100 compute-sanitizer --tool memcheck --error-exitcode 9 sdpa-lab verify --variant $A --filter bf16/d64 --quick --seeds 1 --no-codec --json /tmp/s.json > /tmp/san.log 2>&1; el "memcheck rc=$?"; grep -E "ERROR SUMMARY|verify:" /tmp/san.log | tail -2
for pass in 1 2; do
  P=""; [ $pass = 1 ] && P=--peers
  timeout -s KILL 150 sdpa-lab bench --suite mission --precision f16,bf16 $P --out $OUT/def$pass.json > $OUT/def$pass.log 2>&1; el "bench defaults $pass rc=$?"
  timeout -s KILL 150 sdpa-lab bench --suite mission --precision f16,bf16 --variant $A --variant $B --variant $C --out $OUT/m64_$pass.json > $OUT/m64_$pass.log 2>&1; el "bench m64 $pass rc=$?"
done
python3 - $OUT/def1.json $OUT/def2.json $OUT/m64_1.json $OUT/m64_2.json <<'PY'
import json, sys, collections
t = collections.defaultdict(list)
for f in sys.argv[1:]:
    try: rows = json.load(open(f))['rows']
    except Exception as e: print(f, e); continue
    for r in rows:
        if r.get('status') != 'ok': continue
        us = (r.get('stats') or {}).get('median_us') or (r.get('stats') or {}).get('p50_us')
        t[(r['case'], r['precision'], r['implementation'] + ':' + r['backend'])].append(us)
for k in sorted(t): print(f"{k[0]:14s} {k[1]:5s} {k[2][:48]:48s} " + " ".join(f"{x:.2f}" if x else "-" for x in t[k]))
PY
