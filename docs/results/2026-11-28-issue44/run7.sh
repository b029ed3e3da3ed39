#!/usr/bin/env bash
# Issue 44 item 7, the landed (inline) form: not yet run on a GPU when it landed. Build here
# first: `../shared/device/pack.sh` (after it, .device/base/sdpa-lab from fc56fd7:
# `git stash`-free: `git worktree add /tmp/base fc56fd7 && cargo build --release -p sdpa-lab
# --manifest-path /tmp/base/Cargo.toml`, copy its target/release/sdpa-lab). Then carry .device.
# gpu_nonfinite (every family) and memcheck over it, the shipped defaults' memcheck and
# racecheck (gpu_sanitize), then causal fa/fp8 quick and decode benches before/after, fa again
# in the other order. Logs straight into $OUT (a call that times out still returns them).
# Two device calls (each under the 600 s limit): `run7.sh tests`, then `run7.sh bench`.
set -uo pipefail
what=${1:-tests}
O=${OUT:-/tmp/out}; mkdir -p "$O"
export SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab SDPA_CACHE_DIR=/tmp/kcache-bin
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$O/summary.txt"; }
nvidia-smi -L > "$O/gpu.txt"
if [ "$what" = tests ]; then
timeout 150 .device/tests/gpu_nonfinite-test --include-ignored --test-threads 4 > "$O/test-nonfinite.log" 2>&1
say "gpu_nonfinite rc=$? $(grep -E '^test result' "$O/test-nonfinite.log" | tail -1)"
grep -E '^---- |panicked|left:|right:' "$O/test-nonfinite.log" | head -12
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 .device/tests/gpu_nonfinite-test \
  --include-ignored --test-threads 2 > "$O/memcheck-nonfinite.log" 2>&1
say "memcheck nonfinite rc=$? $(grep -E 'ERROR SUMMARY' "$O/memcheck-nonfinite.log" | tail -1)"
for tool in memcheck racecheck; do
  for i in 0 1 2 3; do
    SDPA_SHARD=$i/4 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      .device/tests/gpu_sanitize-test --include-ignored --nocapture > "$O/$tool-defaults-$i.log" 2>&1 &
  done
  wait
  for i in 0 1 2 3; do
    say "$tool defaults $i: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$O/$tool-defaults-$i.log" | tail -1)"
  done
done
exit 0
fi
bench() {  # build suite out args...
  local b=$1 s=$2 o=$3; shift 3
  SDPA_CACHE_DIR=/tmp/kcache-$b timeout 100 .device/$b/sdpa-lab bench --suite $s --no-ceilings "$@" --out "$O/$o-$b.json" > "$O/$o-$b.log" 2>&1
  say "bench $o $b rc=$?"
}
for b in base bin; do bench $b fa fa --quick --precision f16,bf16 --filter causal; done
for b in base bin; do bench $b fp8 fp8 --quick --precision fp8,fp8kv_f16 --filter causal; done
for b in base bin; do bench $b decode decode; done
for b in bin base; do bench $b fa fa2 --quick --precision f16,bf16 --filter causal; done
for s in fa fp8 decode fa2; do
  .device/bin/sdpa-lab compare "$O/$s-base.json" "$O/$s-bin.json" --threshold 3 --out "$O/cmp-$s" > "$O/cmp-$s.txt" 2>&1
  echo "== $s"; grep -E 'REGRESSION|faster|geometric|regression\(s\)' "$O/cmp-$s.txt" | cut -c1-160 | head -10
done
