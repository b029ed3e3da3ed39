#!/bin/bash
# Round 26, run 140 (nvidia-h100-x4 request, same warm machine as 139 if held): the SM margin on
# the FP8-KV rings (0 against 8), bf16 causal at 8 again and at 12.
export PATH=$PWD/.device/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
one() { n=$1; shift; timeout -s KILL 110 sdpa-lab cp-bench --ranks 4 --iters 5 "$@" --out $OUT/$n > $OUT/$n.log 2>&1; echo "== $n rc=$? :: $(tail -1 $OUT/$n.log)"; }
one cf_m0 --causal --fp8-kv --sm-margin 0
one cf_m8 --causal --fp8-kv --sm-margin 8
one f_m0 --fp8-kv --sm-margin 0
one f_m8 --fp8-kv --sm-margin 8
one c_m8b --causal --sm-margin 8
one c_m12 --causal --sm-margin 12
one c_m0b --causal --sm-margin 0
