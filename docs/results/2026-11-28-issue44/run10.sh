#!/usr/bin/env bash
# Issue 44 item 10, after run 9: the non-blocking ring with two changes, (a) the transfer
# stream waits for the compute stream before each step's group (run 9's 4-rank "check FAILED":
# the receive into a slot raced the previous step's attention, see ring.rs), (b) NCCL on a
# high-priority stream (cp-bench; SDPA_CP_NORMAL_STREAM=1 keeps a normal one). Against main
# (blocking communicator, normal stream). Carry .x4 (sdpa-lab-base = main, sdpa-lab-new,
# cp_ring_gpu-test from the branch).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi -L > "$O/gpu.txt"
lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))')
mkdir -p /tmp/nccl && ln -sf "$lib"/libnccl.so.2 /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:$lib:${LD_LIBRARY_PATH:-} SDPA_CACHE_DIR=/tmp/kc
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$O/summary.txt"; }
CUDA_VISIBLE_DEVICES=0,1 timeout 150 .x4/cp_ring_gpu-test --include-ignored --test-threads 1 > "$O/cp_ring.log" 2>&1
say "cp_ring_gpu rc=$? $(grep -E '^test result' "$O/cp_ring.log" | tail -1)"
run() {  # name env ranks seq causal
  local name=$1 env=$2 ranks=$3 seq=$4 c=$5 dev=0,1,2,3 b=${1%%-*}
  [ "$ranks" = 2 ] && dev=0,1
  local log="$O/cp-$ranks-$seq-$name${c:+-causal}.log"
  env $env CUDA_VISIBLE_DEVICES=$dev timeout 120 .x4/sdpa-lab-$b cp-bench --ranks $ranks --seq $seq $c --iters 5 --out /tmp/cp-$name > "$log" 2>&1
  say "$ranks ranks S $seq ${c:-dense} $name rc=$? $(grep -iE 'scaling' "$log" | tail -1 | sed 's/.*SM margin 8: //; s/, [0-9.]* MB sent per rank//')"
}
for c in "--causal" ""; do
  for n in base new new-normal new base; do
    e=X=1; [ "$n" = new-normal ] && e=SDPA_CP_NORMAL_STREAM=1
    run $n $e 2 32768 "$c"
  done
done
for c in "--causal" ""; do
  for n in base new new base; do run $n X=1 4 131072 "$c"; done
done
