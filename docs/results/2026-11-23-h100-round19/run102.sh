#!/bin/bash
# Round 19, run 102: ncu at D128 causal S 2k: f16 default, fp8kv_f16 default (fragment
# decode), simfp8 fragment decode and simfp8's 256-row tile.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p $OUT/r artifacts/cache
T0=$(date +%s); el() { echo "$1 $(( $(date +%s)-T0 ))s"; }
M=smsp__inst_executed.sum,smsp__cycles_active.avg,gpu__time_duration.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_fmaheavy.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fp16.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_pipe_xu.sum,smsp__inst_executed_pipe_tensor_op_hmma.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
run() { # tag suite precision [variant]
  local v=""; [ -n "$4" ] && v="--variant $4"
  timeout 150 ncu -k sdpa_portable --launch-skip 20 --launch-count 1 --section SchedulerStats --section WarpStateStats --metrics $M \
    sdpa-lab bench --suite $2 --filter d128_s2k_causal --precision $3 $v --no-ceilings --out /tmp/b_$1.json > $OUT/r/ncu_$1.log 2>&1
  el "$1 rc=$?"
}
run f16 fa f16
run fp8kv_frag fp8 fp8kv_f16
run sim_frag fp8 simfp8 portable.m128.n64.w4.s2.b2.ctfhelx
run sim_m256 fp8 simfp8 portable.m256.n32.w8.s4.b1.ctredx
for f in $OUT/r/ncu_*.log; do echo "== $f"; grep -E "sdpa_portable \(|inst_executed|cycles_active|time_duration|issue_active|hmma_cycles|Issued Warp|Eligible Warps|Warp Cycles Per Issued|fmaheavy" $f | head -24; done
cd $OUT && tar czf r.tgz r && rm -rf r
