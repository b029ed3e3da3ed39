#!/usr/bin/env bash
# Issue 46, prepared 2026-11-28 for the next session (not run: the device time was spent):
#   1. memcheck and racecheck of verify --quick on the 192-key 16-bit D128 tile (registered,
#      dispatched once clean) and on the full-FP8 D256 tiles after the one-chain change;
#   2. the 16-bit gap's mechanism: ncu of ours and of FlashAttention-3 at bf16 D128 causal S 4k
#      (fa grid: batch 4, 16 heads; FA3 is CUTLASS's device_kernel), the same sections for both, to compare issue slots, stall
#      reasons and tensor-pipe use.
# Build: ../shared/device/pack.sh (carry .device/bin) and the fa3-fwd wheel into .device/py.
set -uo pipefail
O=${OUT:-/tmp/out}; L=/tmp/logs46n; mkdir -p "$L" "$O"; D=$PWD/.device
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$L/summary.txt"; }
export SDPA_CACHE_DIR=/tmp/kc46n
LAB=$D/bin/sdpa-lab
for V in "hopper.m128.n192.w12.s2.b1.w4pogex 16/d128" "hopper.m128.n64.w12.s3.b1.w4pgex /fp8/d256" "hopper.m128.n64.w12.s3.b1.w4gex /fp8/d256"; do
  set -- $V; n=$(echo $1 | cut -d. -f3,6)
  for tool in memcheck racecheck; do
    timeout -s KILL 200 compute-sanitizer --tool $tool --error-exitcode 9 $LAB verify --quick --variant $1 --filter $2 --no-codec > $L/$tool-$n.log 2>&1
    say "$tool $1 $2 rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/$tool-$n.log | tail -1) $(grep -E 'passed' $L/$tool-$n.log | tail -1)"
  done
done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site46n "$D"/py/*.whl > "$L/pip.log" 2>&1
export PYTHONPATH=/tmp/site46n
timeout -s KILL 200 $LAB profile --suite fa --quick --precision bf16 --filter d128_s4k_causal --out $L/prof-ours > $L/prof-ours.log 2>&1
say "profile ours rc=$?"
cat > $L/case.json <<'JSON'
[{"suite": "fa", "case": "d128_s4k_causal", "shape": {"batch": 4, "seq_q": 4096, "seq_kv": 4096, "heads_q": 16, "heads_kv": 16, "head_dim": 128}, "precision": "bf16", "causal": true, "mode": "hot", "warmup": 10, "iters": 100}]
JSON
timeout -s KILL 200 ncu --clock-control none --kernel-name regex:device_kernel --launch-skip 20 --launch-count 3 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --export $L/fa3 python3 scripts/peers.py --cases $L/case.json --out $L/peers.json > $L/ncu-fa3.log 2>&1
say "ncu fa3 rc=$?"
tar czf "$O/logs.tgz" -C /tmp logs46n
cat "$L/summary.txt"
