#!/bin/bash
# Round 26, run 141 (same warm 4-GPU machine): 2 ranks at SM margin 8, the four cases, and bf16
# causal at 0 for comparison.
export PATH=$PWD/.device/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
one() { n=$1; shift; timeout -s KILL 110 sdpa-lab cp-bench --ranks 2 --iters 5 "$@" --out $OUT/$n > $OUT/$n.log 2>&1; echo "== $n rc=$? :: $(tail -1 $OUT/$n.log)"; }
one n2_m8 --sm-margin 8
one c2_m8 --causal --sm-margin 8
one c2_m0 --causal --sm-margin 0
one f2_m8 --fp8-kv --sm-margin 8
one cf2_m8 --causal --fp8-kv --sm-margin 8
