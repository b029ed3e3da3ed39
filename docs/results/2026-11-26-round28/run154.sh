#!/bin/bash
# Round 28, run 154 (one GPU). Issue 28: Nsight Compute of the full-FP8 D128 S 4k default after
# run 153 (issue slots, pipes, stall reasons). Issue 32: verify of every portable spec, and the
# portable family's shipped defaults before (13d899a, .device/base32) and after the cleanup in
# the same run, two interleaved passes: the mission suite, FP8-KV prefill (fp8 suite), and the
# 16-bit causal S 1k rows. Detached in /tmp/r154; polled.
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache /tmp/r154
R=/tmp/r154
cat > $R/job.sh <<JOB
T0=\$(date +%s); el() { echo "== \$1 \$(( \$(date +%s)-T0 ))s" >> $R/log; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader >> $R/log
B="bench --suite fp8 --quick --precision fp8 --filter d128_s4k --no-ceilings --iters 100"
timeout -s KILL 200 ncu --clock-control none -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section InstructionStats sdpa-lab \$B --out $R/x.json > $R/ncu1.log 2>&1; el "ncu sections rc=\$?"
timeout -s KILL 200 ncu --clock-control none -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 --metrics "regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,regex:^sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$,regex:^sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$,smsp__issue_active.avg.pct_of_peak_sustained_active" sdpa-lab \$B --out $R/x.json > $R/ncu2.log 2>&1; el "ncu metrics rc=\$?"
timeout -s KILL 330 sdpa-lab verify --filter portable --quick --seeds 2 --no-codec --json $R/vport.json > $R/vport.log 2>&1; el "verify portable rc=\$?"
grep "verify:" $R/vport.log >> $R/log
grep -iE "fail" $R/vport.log | head -8 >> $R/log
for pass in 1 2; do
  for who in base new; do
    X=sdpa-lab; [ \$who = base ] && X=.device/base32/sdpa-lab
    timeout -s KILL 120 \$X bench --suite mission --no-ceilings --out $R/m_\$who\$pass.json > /dev/null 2>&1; el "mission \$who \$pass rc=\$?"
    timeout -s KILL 120 \$X bench --suite fp8 --quick --precision fp8kv_f16,fp8kv_bf16 --no-ceilings --out $R/k_\$who\$pass.json > /dev/null 2>&1; el "fp8kv \$who \$pass rc=\$?"
    timeout -s KILL 60 \$X bench --suite fa --quick --precision f16,bf16 --filter s1k_causal --no-ceilings --out $R/c_\$who\$pass.json > /dev/null 2>&1; el "causal1k \$who \$pass rc=\$?"
  done
done
touch $R/all.done
JOB
setsid nohup bash $R/job.sh > /dev/null 2>&1 < /dev/null &
for i in $(seq 1 112); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
grep -E "Issue Slots|Executed Ipc|SM Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Duration|Compute \(SM\)|Registers" $R/ncu1.log | head -30
grep -E "stalled|pipe|issue_active" $R/ncu2.log | awk '\$NF+0 > 0.5' | head -60
