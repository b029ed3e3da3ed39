#!/usr/bin/env bash
# Issue 49, lever 1 (one kernel per call): the decode kernel's last split of each tile merges
# the splits' partials, replacing the merge kernel. Same run:
#   1. verify --quick --filter decode (every decode spec: contiguous, varlen, paged);
#   2. memcheck and racecheck of verify --quick on the shipped FP8-KV and fp16 D128 decode tiles;
#   3. bench --suite decode (and mission) of the binary before (sdpa-lab-before, a merge kernel)
#      and after, alternating, with the copy ceiling in the first;
#   4. issue 46: FP8-KV D64 prefill on the 192-row tile (m192.n128 w4pex) beside the shipped
#      128-row tile and our 16-bit D64, bench --suite fp8 --quick --filter d64 (fp8kv_f16).
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs5; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee "$L/gpu.txt"
NEW=$D/bin/sdpa-lab OLD=$D/bin/sdpa-lab-before
export SDPA_CACHE_DIR=/tmp/kc5
timeout -s KILL 200 $NEW verify --quick --filter decode --no-codec --json $L/verify.json > $L/verify.log 2>&1
say "verify decode rc=$? $(grep -E 'passed|failed' $L/verify.log | tail -1)"
for V in "--variant decode.m16.n64.w4.s3.b2.cex --filter fp8kv_f16/d128" "--variant decode.m16.n64.w4.s3.b2.cex --filter /f16/d128"; do
  n=$(echo $V | awk '{print $4}' | tr / _)
  timeout -s KILL 120 compute-sanitizer --tool memcheck --error-exitcode 9 $NEW verify --quick $V --no-codec > $L/memcheck$n.log 2>&1
  say "memcheck $n rc=$? $(grep 'ERROR SUMMARY' $L/memcheck$n.log | tail -1) $(grep -E 'passed' $L/memcheck$n.log | tail -1)"
  timeout -s KILL 150 compute-sanitizer --tool racecheck --error-exitcode 9 $NEW verify --quick $V --no-codec > $L/racecheck$n.log 2>&1
  say "racecheck $n rc=$? $(grep 'RACECHECK SUMMARY' $L/racecheck$n.log | tail -1) $(grep -E 'passed' $L/racecheck$n.log | tail -1)"
done
timeout -s KILL 120 $OLD bench --suite decode,mission --out $L/old1.json > $L/old1.log 2>&1; say "bench before rc=$?"
timeout -s KILL 120 $NEW bench --suite decode,mission --no-ceilings --out $L/new1.json > $L/new1.log 2>&1; say "bench after rc=$?"
timeout -s KILL 100 $OLD bench --suite decode,mission --no-ceilings --out $L/old2.json > $L/old2.log 2>&1; say "bench before again rc=$?"
timeout -s KILL 100 $NEW bench --suite decode,mission --no-ceilings --out $L/new2.json > $L/new2.log 2>&1; say "bench after again rc=$?"
timeout -s KILL 100 $NEW bench --suite fp8 --quick --precision fp8kv_f16 --filter d64 --variant hopper.m128.n128.w12.s2.b1.w4pogex --variant hopper.m192.n128.w16.s2.b1.w4pex --no-ceilings --out $L/kv8.json > $L/kv8.log 2>&1; say "bench fp8kv d64 rc=$?"
timeout -s KILL 100 $NEW bench --suite fa --quick --precision f16 --filter d64 --no-ceilings --out $L/f16.json > $L/f16.log 2>&1; say "bench f16 d64 rc=$?"
tar czf "$O/logs.tgz" -C /tmp logs5
python3 - "$L" <<'PY'
import json, sys
L = sys.argv[1]
def load(n):
    try: return json.load(open(f"{L}/{n}.json"))["rows"]
    except Exception: return []
T = {}
for tag in ("old1", "new1", "old2", "new2"):
    for r in load(tag):
        if r.get("status") != "ok" or r["implementation"] != "fp8-sdpa": continue
        m = (r.get("stats") or {}).get("median_us") or (r.get("stats") or {}).get("p50_us")
        T.setdefault((r["precision"], r["case"]), {})[tag] = (m, r.get("pct_of_ceiling"))
print("precision case | before us | after us | after/before (both pairs) | % of copy before")
for (p, c), v in sorted(T.items()):
    g = lambda k: (v.get(k) or (None, None))
    o1, n1, o2, n2 = g("old1")[0], g("new1")[0], g("old2")[0], g("new2")[0]
    r1 = n1 / o1 if o1 and n1 else 0
    r2 = n2 / o2 if o2 and n2 else 0
    pc = g("old1")[1]
    print(f"{p:10s} {c:34s} {o1 or 0:8.2f} {n1 or 0:8.2f} {r1:6.3f} {r2:6.3f} {pc if pc is not None else '-'}")
for r in load("kv8") + load("f16"):
    if r.get("status") == "ok" and r["implementation"] == "fp8-sdpa": print(r["precision"], r["case"], r["backend"], round(r["tflops"] or 0))
PY
cat "$L/summary.txt"
