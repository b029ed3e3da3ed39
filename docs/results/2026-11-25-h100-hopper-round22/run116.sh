#!/bin/bash
# Round 22, run 116: compute-sanitizer memcheck and racecheck on the shipped D128 defaults
# (persistent ping-pong non-causal, overlap causal) over verify's quick shapes (ragged ones
# included); step (e) candidates verified then timed beside the defaults: D256 N80 (FA3's
# D256 tile), D64 with three consumer warpgroups (192 rows), three stages; Nsight Compute on
# the D128 causal S 4k default.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
for S in hopper.m128.n128.w12.s2.b1.w4pogex/f16/d128/full hopper.m128.n128.w12.s2.b1.w4oex/bf16/d128/causal; do
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 sdpa-lab verify --filter $S --quick --seeds 1 --no-codec --json /tmp/s.json > $OUT/san_$tool.log 2>&1; el "$tool $S rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verify:" $OUT/san_$tool.log | tail -2
  done
done
C="--variant hopper.m128.n80.w12.s2.b1.w4ogex --variant hopper.m128.n80.w12.s2.b1.w4pogex --variant hopper.m192.n128.w16.s2.b1.w4poex --variant hopper.m192.n112.w16.s2.b1.w4poex --variant hopper.m128.n128.w12.s3.b1.w4pogex"
timeout 150 sdpa-lab verify $C --quick --no-codec --json $OUT/verify_cand.json > $OUT/verify_cand.log 2>&1; el "verify candidates rc=$?"
grep -iE "fail|verify:" $OUT/verify_cand.log | tail -4
B="--suite fa --quick --no-ceilings"
timeout 100 sdpa-lab bench $B --filter d256 --variant hopper.m128.n64.w12.s2.b1.w4ogex --variant hopper.m128.n80.w12.s2.b1.w4ogex --variant hopper.m128.n80.w12.s2.b1.w4pogex --out $OUT/bench_d256.json > $OUT/bench_d256.log 2>&1; el "bench d256 rc=$?"
timeout 100 sdpa-lab bench $B --filter d64 --variant hopper.m128.n128.w12.s2.b1.w4pogex --variant hopper.m192.n128.w16.s2.b1.w4poex --variant hopper.m192.n112.w16.s2.b1.w4poex --out $OUT/bench_d64.json > $OUT/bench_d64.log 2>&1; el "bench d64 rc=$?"
timeout 60 sdpa-lab bench $B --filter d128_s4k --variant hopper.m128.n128.w12.s2.b1.w4pogex --variant hopper.m128.n128.w12.s3.b1.w4pogex --out $OUT/bench_d128.json > $OUT/bench_d128.log 2>&1; el "bench d128 rc=$?"
timeout 100 ncu --clock-control none --kernel-name sdpa_hopper --launch-skip 5 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy sdpa-lab bench --suite fa --filter d128_s4k_causal --precision f16 --no-ceilings --out /tmp/n.json > $OUT/ncu_d128_s4k_causal.txt 2>&1; el "ncu rc=$?"
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued|Waves" $OUT/ncu_d128_s4k_causal.txt | head -14
python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/bench_d256.json $OUT/bench_d64.json $OUT/bench_d128.json
