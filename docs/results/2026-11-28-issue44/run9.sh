#!/usr/bin/env bash
# Issue 44 item 10 at the state table's shape: the non-blocking communicator (branch
# nccl-rebase merged with main) against main's blocking one, cp-bench on 4 GPUs at S 128k
# (dense and causal, both orders), and on 2 at S 32k causal (run 6's shape); first
# cp_ring_gpu's three tests with the new communicator. Carry .x4: sdpa-lab-base (main),
# sdpa-lab-new (nccl-rebase), cp_ring_gpu-test (nccl-rebase, --features nccl).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi -L > "$O/gpu.txt"
lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))')
mkdir -p /tmp/nccl && ln -sf "$lib"/libnccl.so.2 /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$lib:${LD_LIBRARY_PATH:-} SDPA_CACHE_DIR=/tmp/kc
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$O/summary.txt"; }
CUDA_VISIBLE_DEVICES=0,1 timeout 150 .x4/cp_ring_gpu-test --include-ignored --test-threads 1 > "$O/cp_ring.log" 2>&1
say "cp_ring_gpu rc=$? $(grep -E '^test result' "$O/cp_ring.log" | tail -1)"
n=0
for c in "" "--causal"; do
  for b in base new new base; do
    n=$((n + 1)); log="$O/cp4-$n-$b${c:+-causal}.log"
    timeout 120 .x4/sdpa-lab-$b cp-bench --ranks 4 --seq 131072 $c --iters 5 --out "/tmp/cp-$b" > "$log" 2>&1
    say "4 ranks S 128k $b ${c:-dense} rc=$? $(grep -iE 'scaling' "$log" | tail -1 | sed 's/.*SM margin 8: //')"
  done
done
for b in base new new base; do
  n=$((n + 1)); log="$O/cp2-$n-$b-causal.log"
  CUDA_VISIBLE_DEVICES=0,1 timeout 100 .x4/sdpa-lab-$b cp-bench --ranks 2 --seq 32768 --causal --iters 5 --out "/tmp/cp-$b" > "$log" 2>&1
  say "2 ranks S 32k $b causal rc=$? $(grep -iE 'scaling' "$log" | tail -1 | sed 's/.*SM margin 8: //')"
done
