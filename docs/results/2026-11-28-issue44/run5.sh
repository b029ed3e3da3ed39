#!/usr/bin/env bash
# Issue 44 item 7, GPU round 5: Hopper's rare path out of line (run 4 found 6 % on Hopper
# D64 causal with it inlined). gpu_nonfinite (every family) and its memcheck, then before
# (fc56fd7, .device/base) / after (.device/bin) benches of the causal fa and fp8 quick rows,
# then the fa rows again in the other order. Logs straight into $OUT.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
export SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab SDPA_CACHE_DIR=/tmp/kcache-bin
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$O/summary.txt"; }
nvidia-smi -L > "$O/gpu.txt"
timeout 150 .device/tests/gpu_nonfinite-test --include-ignored --test-threads 4 > "$O/test-nonfinite.log" 2>&1
say "gpu_nonfinite rc=$? $(grep -E '^test result' "$O/test-nonfinite.log" | tail -1)"
grep -E '^---- |panicked|left:|right:' "$O/test-nonfinite.log" | head -12
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 .device/tests/gpu_nonfinite-test \
  --include-ignored --test-threads 2 hopper > "$O/memcheck-nonfinite-hopper.log" 2>&1
say "memcheck hopper nonfinite rc=$? $(grep -E 'ERROR SUMMARY' "$O/memcheck-nonfinite-hopper.log" | tail -1)"
bench() {  # build suite out args...
  local b=$1 s=$2 o=$3; shift 3
  SDPA_CACHE_DIR=/tmp/kcache-$b timeout 100 .device/$b/sdpa-lab bench --suite $s --no-ceilings "$@" --out "$O/$o-$b.json" > "$O/$o-$b.log" 2>&1
  say "bench $o $b rc=$?"
}
for b in base bin; do bench $b fa fa --quick --precision f16,bf16 --filter causal; done
for b in base bin; do bench $b fp8 fp8 --quick --precision fp8,fp8kv_f16 --filter causal; done
for b in bin base; do bench $b fa fa2 --quick --precision f16,bf16 --filter causal; done
for s in fa fp8 fa2; do
  .device/bin/sdpa-lab compare "$O/$s-base.json" "$O/$s-bin.json" --threshold 3 --out "$O/cmp-$s" > "$O/cmp-$s.txt" 2>&1
  echo "== $s"; grep -E 'REGRESSION|faster|geometric|regression\(s\)' "$O/cmp-$s.txt" | cut -c1-160 | head -10
done
cat "$O/summary.txt"
