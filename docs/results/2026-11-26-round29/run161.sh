#!/bin/bash
# Round 29, run 161 (one GPU): where three open targets spend their time, before changing code.
# (1) Issue 27, the mission shape (B2 H8 S512 D64, 128 blocks of the 64-row Hopper tile): is it
#     L2-to-SM bandwidth (every block reads its head's whole K/V, 16 MB per call) or latency?
# (2) Issue 28 item 2, round 26's FP8-KV producer-decode design (fp8kv-producer-decode-v2.patch on
#     0a92b86, binary .device/kv2), D128 S 4k f16: where its warps wait, against the 16-bit kernel.
# (3) Issue 27, GQA 4 FP8-KV decode (b32 sq1 skv4k hkv8, 79 % of the copy ceiling in run 125).
# ncu --clock-control none --cache-control none (warm L2, as the bench's repeated calls).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT/r
R=$OUT/r
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
N="ncu --clock-control none --cache-control none"
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats"
# (1) mission: 111 launches of mission-s256 come first in hot mode (1 checked + 10 warm-up + 100).
sdpa-lab bench --suite mission --precision f16 --no-ceilings --out $R/mission.json > /dev/null 2>&1; el "bench mission rc=$?"
timeout -s KILL 120 $N -k regex:sdpa_hopper --launch-skip 150 --launch-count 1 $SEC -o /tmp/m_hop sdpa-lab bench --suite mission --filter mission --precision f16 --mode hot --no-ceilings --out /tmp/x.json > $R/m_hop.log 2>&1; el "ncu mission hopper rc=$?"
timeout -s KILL 120 $N -k regex:sdpa_portable --launch-skip 150 --launch-count 1 $SEC -o /tmp/m_por sdpa-lab bench --suite mission --filter mission --precision f16 --mode hot --variant portable.m64.n64.w4.s4.b2.ctelx --no-ceilings --out /tmp/x.json > $R/m_por.log 2>&1; el "ncu mission portable rc=$?"
# (2) FP8-KV v2 against the 16-bit default, D128 S 4k f16 (persistent ping-pong tile).
PO=hopper.m128.n128.w12.s2.b1.w4pogex
timeout -s KILL 200 $N -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 $SEC --section SourceCounters -o /tmp/kv2 .device/kv2/sdpa-lab bench --suite fp8 --quick --precision fp8kv_f16 --filter d128_s4k --variant $PO --no-ceilings --iters 100 --out /tmp/x.json > $R/kv2.log 2>&1; el "ncu kv2 rc=$?"
timeout -s KILL 120 $N -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 $SEC -o /tmp/h16 sdpa-lab bench --suite fp8 --quick --precision f16 --filter d128_s4k --no-ceilings --iters 100 --out /tmp/x.json > $R/h16.log 2>&1; el "ncu 16-bit rc=$?"
# (3) GQA 4 FP8-KV decode.
timeout -s KILL 120 $N -k regex:^sdpa_decode$ --launch-skip 20 --launch-count 1 $SEC -o /tmp/dec sdpa-lab bench --suite decode --precision fp8kv_f16 --filter b32_sq1_skv4k_hkv8 --no-ceilings --out /tmp/x.json > $R/dec.log 2>&1; el "ncu decode rc=$?"
for f in m_hop m_por kv2 h16 dec; do
  [ -e /tmp/$f.ncu-rep ] && ncu --import /tmp/$f.ncu-rep --page details --csv > $R/$f.csv 2>/dev/null
done
[ -e /tmp/kv2.ncu-rep ] && ncu --import /tmp/kv2.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $R/kv2_sass.csv.gz
cp /tmp/kv2.ncu-rep $R/ 2>/dev/null
python3 - <<'PY'
import csv, os, json
R = os.environ['OUT'] + '/r'
want = ['Duration', 'Grid Size', 'Registers Per Thread', 'Memory Throughput', 'DRAM Throughput', 'L1/TEX Cache Throughput',
        'L2 Cache Throughput', 'Compute (SM) Throughput', 'L2 Hit Rate', 'Mem Busy', 'Max Bandwidth', 'Mem Pipes Busy',
        'Issue Slots Busy', 'No Eligible', 'Eligible Warps Per Scheduler', 'Active Warps Per Scheduler',
        'Warp Cycles Per Issued Instruction', 'Achieved Occupancy', 'Shared Memory Configuration Size']
for f in ['m_hop', 'm_por', 'kv2', 'h16', 'dec']:
    p = f'{R}/{f}.csv'
    if not os.path.exists(p): print(f, 'missing'); continue
    rows = list(csv.DictReader(open(p)))
    if not rows: print(f, 'empty'); continue
    print(f'-- {f}: {rows[0].get("Kernel Name","")[:40]}')
    seen = set()
    for r in rows:
        n = r.get('Metric Name', '')
        if n in want and n not in seen:
            seen.add(n); print(f'   {n:40s} {r.get("Metric Value","")} {r.get("Metric Unit","")}')
try:
    d = json.load(open(f'{R}/mission.json'))
    for r in d['rows']:
        if r['status'] == 'ok': print(f"{r['case']:14s} {r['implementation']:10s} {r['stats']['median_us']:.2f} us")
except Exception as e: print('mission.json', e)
PY
cd $OUT && tar czf r161.tgz r && rm -rf r
