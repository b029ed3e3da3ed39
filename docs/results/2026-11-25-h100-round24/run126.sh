#!/bin/bash
# Round 24, run 126 (nvidia-h100-x4 request; ran on 4 H200s, NV18 all-to-all): cp-bench with 4
# ranks, S 128k, D128, H16: bf16 and FP8-KV, causal and not (the command given to the device
# tool, kept here).
export PATH=$PWD/.device/bin:$PATH
for f in "" "--causal" "--fp8-kv" "--causal --fp8-kv"; do n=cp4$(echo "$f" | tr -d ' -'); timeout 100 sdpa-lab cp-bench --ranks 4 --iters 5 $f --out $OUT/$n > $OUT/$n.log 2>&1; echo "== cp-bench 4 $f rc=$?"; tail -2 $OUT/$n.log; done
