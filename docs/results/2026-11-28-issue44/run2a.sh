#!/usr/bin/env bash
# Issue 44, GPU round 2a: every GPU test, then memcheck and racecheck over every shipped default
# (gpu_sanitize: a small and a ragged shape each) and over the unchecked paged calls
# (gpu_paged_clamp). .device/ carried; logs in $OUT/logs.tar.gz, a table last.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/logs; mkdir -p "$OUT" "$FINAL"
export SDPA_CACHE_DIR=/tmp/kcache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
nvidia-smi -L | tee "$OUT/gpu.txt"
lab=.device/bin/sdpa-lab
summary=()
t0=$SECONDS
# Fill the kernel cache in parallel first (verify and the tests then load, not compile).
timeout 200 $lab check --arch sm_90a --summary > "$OUT/check.log" 2>&1
summary+=("check rc=$? $(tail -1 "$OUT/check.log") [$((SECONDS - t0))s]")
for t in .device/tests/*; do
  n=$(basename "$t")
  if [ -n "${ONLY:-}" ] && ! grep -qE "$ONLY" <<< "$n"; then continue; fi
  timeout 240 "$t" --include-ignored --test-threads 4 > "$OUT/test-$n.log" 2>&1
  rc=$?
  summary+=("$n rc=$rc $(grep -E '^test result' "$OUT/test-$n.log" | tail -1) [$((SECONDS - t0))s]")
  [ $rc -ne 0 ] && grep -E '^---- |panicked' "$OUT/test-$n.log" | head -20
done > "$OUT/failures.txt"
# The defaults in 4 shards, each its own sanitizer process, side by side on the one GPU.
for tool in memcheck racecheck; do
  for i in 0 1 2 3; do
    SDPA_SHARD=$i/4 timeout ${SAN_LIMIT:-240} compute-sanitizer --tool $tool --error-exitcode 9 \
      .device/tests/gpu_sanitize-test --include-ignored > "$OUT/$tool-defaults-$i.log" 2>&1 &
  done
  if [ $tool = memcheck ]; then
    for n in gpu_paged_clamp-test gpu_nonfinite-test gpu_soundness-test; do
      [ -x .device/tests/$n ] || continue
      timeout ${SAN_LIMIT:-240} compute-sanitizer --tool memcheck --error-exitcode 9 .device/tests/$n \
        --include-ignored --test-threads 1 --skip past_2_31 > "$OUT/memcheck-$n.log" 2>&1 &
    done
  fi
  wait
  for f in "$OUT"/$tool-*.log; do
    summary+=("$(basename "$f" .log): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1) $(grep -E '^test result' "$f" | tail -1) $(grep -E 'default specs' "$f" | tail -1) [$((SECONDS - t0))s]")
  done
done
printf '%s\n' "${summary[@]}" > "$OUT/summary.txt"
tar czf "$FINAL/logs.tar.gz" -C /tmp logs
cat "$OUT/failures.txt" "$OUT/summary.txt"
