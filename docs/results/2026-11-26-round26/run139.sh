#!/bin/bash
# Round 26, run 139 (nvidia-h100-x4 request): cp-bench with 4 ranks, S 128k, D128, H16, and
# the new --sm-margin (SMs each attention call leaves to NCCL's kernels). Prediction: the
# persistent Hopper kernel's static tile walk waits for NCCL's CTAs on k SMs every step, so
# 4-rank causal gains with a margin of k or more (82 % -> about 90 %).
export PATH=$PWD/.device/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
one() { n=$1; shift; timeout -s KILL 110 sdpa-lab cp-bench --ranks 4 --iters 5 "$@" --out $OUT/$n > $OUT/$n.log 2>&1; echo "== $n rc=$? :: $(tail -1 $OUT/$n.log)"; }
NCCL_DEBUG=INFO one c_m0 --causal --sm-margin 0
grep -h -i -E "nchannels|p2p|channel 0" $OUT/c_m0.log | sort | uniq -c | sort -rn | head -8
one c_m8 --causal --sm-margin 8
one c_m4 --causal --sm-margin 4
one c_m16 --causal --sm-margin 16
one n_m0 --sm-margin 0
one n_m8 --sm-margin 8
one cf_m8 --causal --fp8-kv --sm-margin 8
