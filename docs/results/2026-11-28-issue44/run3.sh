#!/usr/bin/env bash
# Issue 44, GPU round 3 (the landing build): every GPU test; memcheck and racecheck over every
# shipped default (gpu_sanitize, 4 shards side by side, spec counts printed) and memcheck over
# the unchecked paged calls, the soundness and paged-tail tests; then before (cf86538,
# .device/base) / after (.device/bin) benches of the decode suite and the fa rows item 7's
# reverted fix had slowed. Logs in $OUT/logs.tar.gz; a table last.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/logs; mkdir -p "$OUT" "$FINAL"
export SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
nvidia-smi -L | tee "$OUT/gpu.txt"
summary=(); t0=$SECONDS
SDPA_CACHE_DIR=/tmp/kcache-bin timeout 200 .device/bin/sdpa-lab check --arch sm_90a --summary > "$OUT/check.log" 2>&1
summary+=("check rc=$? $(tail -1 "$OUT/check.log") [$((SECONDS - t0))s]")
export SDPA_CACHE_DIR=/tmp/kcache-bin
for t in .device/tests/*; do
  n=$(basename "$t")
  timeout 240 "$t" --include-ignored --test-threads 4 > "$OUT/test-$n.log" 2>&1
  rc=$?
  summary+=("$n rc=$rc $(grep -E '^test result' "$OUT/test-$n.log" | tail -1) [$((SECONDS - t0))s]")
  [ $rc -ne 0 ] && grep -E '^---- |panicked' "$OUT/test-$n.log" | head -20
done > "$OUT/failures.txt"
for tool in memcheck racecheck; do
  for i in 0 1 2 3; do
    SDPA_SHARD=$i/4 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 \
      .device/tests/gpu_sanitize-test --include-ignored --nocapture > "$OUT/$tool-defaults-$i.log" 2>&1 &
  done
  if [ $tool = memcheck ]; then
    for n in gpu_paged_clamp-test gpu_nonfinite-test gpu_soundness-test; do
      timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 .device/tests/$n \
        --include-ignored --test-threads 1 --skip past_2_31 > "$OUT/memcheck-$n.log" 2>&1 &
    done
  fi
  wait
  for f in "$OUT"/$tool-*.log; do
    summary+=("$(basename "$f" .log): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1) $(grep -E '^test result' "$f" | tail -1) $(grep -E 'default specs' "$f" | tail -1) [$((SECONDS - t0))s]")
  done
done
printf '%s\n' "${summary[@]}" > "$OUT/summary.txt"
bench() {  # build suite out args...
  local b=$1 s=$2 o=$3; shift 3
  SDPA_CACHE_DIR=/tmp/kcache-$b timeout 200 .device/$b/sdpa-lab bench --suite $s --no-ceilings "$@" --out "$OUT/$o-$b.json" > "$OUT/$o-$b.log" 2>&1
  echo "bench $o $b rc=$? [$((SECONDS - t0))s]" >> "$OUT/summary.txt"
}
bench base decode decode; bench bin decode decode
bench base fa fa --quick --precision f16 --filter causal; bench bin fa fa --quick --precision f16 --filter causal
for s in decode fa; do
  .device/bin/sdpa-lab compare "$OUT/$s-base.json" "$OUT/$s-bin.json" --threshold 3 --out "$OUT/cmp-$s" > "$OUT/cmp-$s.txt" 2>&1
done
tar czf "$FINAL/logs.tar.gz" -C /tmp logs
cat "$OUT/failures.txt" "$OUT/summary.txt"
for s in decode fa; do echo "== $s"; grep -E 'REGRESSION|faster|geometric|regression\(s\)' "$OUT/cmp-$s.txt"; done
