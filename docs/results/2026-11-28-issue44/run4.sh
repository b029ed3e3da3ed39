#!/usr/bin/env bash
# Issue 44 item 7, GPU round 4: the epilogue check and exact rare path (kernels/exact.cuh).
# Every GPU test (gpu_nonfinite's every-family tests first), memcheck over the rare path
# (gpu_nonfinite) and over the shipped defaults, racecheck over the defaults; then before
# (fc56fd7, .device/base) / after (.device/bin) benches of the rows the change touches:
# causal fa and fp8 quick rows and the decode suite. Logs in $OUT/logs.tar.gz; a table last.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/logs; mkdir -p "$OUT" "$FINAL"
export SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
nvidia-smi -L | tee "$OUT/gpu.txt"
summary=(); t0=$SECONDS
export SDPA_CACHE_DIR=/tmp/kcache-bin
run_test() {  # name [args]
  local n=$1; shift
  timeout 300 .device/tests/$n --include-ignored --test-threads 4 "$@" > "$OUT/test-$n.log" 2>&1
  local rc=$?
  summary+=("$n rc=$rc $(grep -E '^test result' "$OUT/test-$n.log" | tail -1) [$((SECONDS - t0))s]")
  [ $rc -ne 0 ] && grep -E '^---- |panicked|assert' "$OUT/test-$n.log" | head -12 >> "$OUT/failures.txt"
}
run_test gpu_nonfinite-test
# The rare path's global reads under memcheck, beside the other tests.
timeout 280 compute-sanitizer --tool memcheck --error-exitcode 9 .device/tests/gpu_nonfinite-test \
  --include-ignored --test-threads 2 decode portable_16bit hopper_keeps > "$OUT/memcheck-nonfinite.log" 2>&1 &
for t in .device/tests/*; do
  n=$(basename "$t")
  [ "$n" = gpu_nonfinite-test ] && continue
  case "$n" in cp_ring_gpu-test|*unit*) continue;; esac
  run_test "$n"
done
wait
summary+=("memcheck-nonfinite: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-nonfinite.log" | tail -1) $(grep -E '^test result' "$OUT/memcheck-nonfinite.log" | tail -1) [$((SECONDS - t0))s]")
for tool in memcheck racecheck; do
  for i in 0 1 2 3; do
    SDPA_SHARD=$i/4 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
      .device/tests/gpu_sanitize-test --include-ignored --nocapture > "$OUT/$tool-defaults-$i.log" 2>&1 &
  done
  wait
  for i in 0 1 2 3; do
    f="$OUT/$tool-defaults-$i.log"
    summary+=("$(basename "$f" .log): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1) $(grep -E 'default specs' "$f" | tail -1) [$((SECONDS - t0))s]")
  done
done
printf '%s\n' "${summary[@]}" > "$OUT/summary.txt"
bench() {  # build suite out args...
  local b=$1 s=$2 o=$3; shift 3
  SDPA_CACHE_DIR=/tmp/kcache-$b timeout 150 .device/$b/sdpa-lab bench --suite $s --no-ceilings "$@" --out "$OUT/$o-$b.json" > "$OUT/$o-$b.log" 2>&1
  echo "bench $o $b rc=$? [$((SECONDS - t0))s]" >> "$OUT/summary.txt"
}
for b in base bin; do bench $b fa fa --quick --precision f16,bf16 --filter causal; done
for b in base bin; do bench $b fp8 fp8 --quick --precision fp8,fp8kv_f16 --filter causal; done
for b in base bin; do bench $b decode decode; done
for b in bin base; do bench $b fa fa2 --quick --precision f16,bf16 --filter causal; done
for s in fa fp8 decode fa2; do
  .device/bin/sdpa-lab compare "$OUT/$s-base.json" "$OUT/$s-bin.json" --threshold 3 --out "$OUT/cmp-$s" > "$OUT/cmp-$s.txt" 2>&1
done
tar czf "$FINAL/logs.tar.gz" -C /tmp logs
cp "$OUT/summary.txt" "$FINAL/"; for s in fa fp8 decode fa2; do cp "$OUT/cmp-$s.txt" "$FINAL/"; done
cat "$OUT/failures.txt" 2>/dev/null | head -40
cat "$OUT/summary.txt"
for s in fa fp8 decode fa2; do echo "== $s"; grep -E 'REGRESSION|faster|slower|geometric|regression\(s\)' "$OUT/cmp-$s.txt" | head -12; done
