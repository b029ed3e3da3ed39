#!/usr/bin/env bash
# Issue 44 item 10 on two GPUs: the non-blocking NCCL communicator (branch nccl-nonblocking,
# merged onto main as nccl-rebase). cp_ring_gpu's three tests, then cp-bench before (main) /
# after at S 32k, dense and causal, twice, to see the bounded waits cost nothing. Logs into $OUT.
# (Run 6 had the group before the step's attention: ring +6 % / +8 %; run 7 queues it after.)
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi -L > "$O/gpu.txt"
lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))')
mkdir -p /tmp/nccl && ln -sf "$lib"/libnccl.so.2 /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$lib:${LD_LIBRARY_PATH:-} SDPA_CACHE_DIR=/tmp/kc
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$O/summary.txt"; }
timeout 240 .x2/cp_ring_gpu-test --include-ignored --test-threads 1 --nocapture > "$O/cp_ring.log" 2>&1
say "cp_ring_gpu rc=$? $(grep -E '^test result' "$O/cp_ring.log" | tail -1)"
grep -E '^test |took|panicked' "$O/cp_ring.log" | head -10
n=0
for c in "" "--causal" "" "--causal"; do
  for b in base new; do
    n=$((n + 1)); log="$O/cp-$n-$b${c:+-causal}.log"
    timeout 100 .x2/sdpa-lab-$b cp-bench --ranks 2 --seq 32768 $c --iters 5 --out "/tmp/cp-$b" > "$log" 2>&1
    say "cp-bench $b $c rc=$? $(grep -iE 'scaling' "$log" | tail -1)"
  done
done
cat "$O/summary.txt"
