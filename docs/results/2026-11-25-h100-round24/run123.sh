#!/bin/bash
# Round 24, run 123: the decode family after the paged-load change (one division per step,
# not two per 16-byte chunk) and the NaN fix in its merges; dispatch's decode threshold
# (Skv >= 1k) and the D64 192-row tile only where it gives four work tiles per SM.
# Tests, verify of every decode spec and of the tuner's winners, the decode suite (default
# with peers; the tuner's FP8-KV winner beside it), the fa D128 grid with the Hopper tune
# winner beside the default, the mission suite, and Nsight Compute on the FP8-KV decode.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/flashinfer/*.whl && export PYTHONPATH=/tmp/site
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT/logs
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
for t in gpu-test attn_gpu-test attn_paged_gpu-test bench_gpu-test; do
  timeout 120 .device/tests/$t --include-ignored > $OUT/logs/$t.log 2>&1; el "$t rc=$?"
  grep -E "test result|FAILED|panicked" $OUT/logs/$t.log | head -4
done
V="--variant decode.m16.n32.w2.s4.b1.cex --variant decode.m16.n64.w4.s2.b1.cex --variant hopper.m128.n192.w12.s2.b1.w4pogex"
timeout 150 sdpa-lab verify --filter decode --quick --seeds 2 --no-codec --json $OUT/logs/verify_decode.json > $OUT/logs/verify_decode.log 2>&1; el "verify decode rc=$?"
grep -E "^verify:" $OUT/logs/verify_decode.log | tail -1
timeout 100 sdpa-lab verify $V --quick --no-codec --json $OUT/logs/verify_tuned.json > $OUT/logs/verify_tuned.log 2>&1; el "verify tuned rc=$?"
grep -E "^verify:" $OUT/logs/verify_tuned.log | tail -1
timeout 200 sdpa-lab bench --suite decode --peers --out $OUT/bench_decode.json > $OUT/logs/bench_decode.log 2>&1; el "bench decode rc=$?"
timeout 70 sdpa-lab bench --suite decode --no-ceilings --variant decode.m16.n32.w2.s4.b1.cex --out $OUT/bench_decode_tuned.json > $OUT/logs/bench_decode_tuned.log 2>&1; el "bench decode tuned rc=$?"
timeout 60 sdpa-lab bench --suite fa --quick --filter d128 --no-ceilings --variant hopper.m128.n128.w12.s2.b1.w4pogex --variant hopper.m128.n192.w12.s2.b1.w4pogex --out $OUT/bench_fa_d128.json > $OUT/logs/bench_fa.log 2>&1; el "bench fa d128 rc=$?"
timeout 30 sdpa-lab bench --suite mission --no-ceilings --out $OUT/mission.json > $OUT/logs/mission.log 2>&1; el "mission rc=$?"
M=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,lts__t_sector_hit_rate.pct,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum
timeout 60 ncu --clock-control none --csv --page raw --metrics $M --kernel-name regex:^sdpa_ --launch-skip 12 --launch-count 4 sdpa-lab bench --suite decode --filter b32_sq1_skv4k_hkv8 --precision fp8kv_f16 --no-ceilings --out /tmp/n1.json > $OUT/ncu_raw_decode.csv 2>$OUT/logs/ncu_raw_decode.err; el "ncu raw rc=$?"
timeout 60 ncu --clock-control none --csv --page raw --metrics $M --kernel-name regex:^sdpa_ --launch-skip 12 --launch-count 2 sdpa-lab bench --suite fa --quick --filter d128_s4k --precision f16 --no-ceilings --out /tmp/n2.json > $OUT/ncu_raw_hopper.csv 2>$OUT/logs/ncu_raw_hopper.err; el "ncu raw hopper rc=$?"
for p in fp8kv_f16 f16; do
  timeout 60 ncu --clock-control none --kernel-name sdpa_decode --launch-skip 6 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats sdpa-lab bench --suite decode --filter b32_sq1_skv4k_hkv8 --precision $p --no-ceilings --out /tmp/n3.json > $OUT/ncu_decode_$p.txt 2>&1; el "ncu decode $p rc=$?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Stall|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Waves Per SM|Grid Size" $OUT/ncu_decode_$p.txt | head -14
done
rm -rf $OUT/bench_decode.peers
python3 docs/results/2026-11-25-h100-round24/decode_table.py $OUT/bench_decode.json $OUT/bench_decode_tuned.json $OUT/mission.json | cut -c1-330
python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/bench_fa_d128.json
# The device tool returns a handful of files: everything travels as one archive.
cd $OUT && tar czf run123.tgz --exclude run123.tgz * && find . -mindepth 1 ! -name run123.tgz -delete
