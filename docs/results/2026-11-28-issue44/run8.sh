#!/usr/bin/env bash
# Issue 44 item 7, the landed form: memcheck over gpu_nonfinite (run 7's 120 s bound was too
# short under the sanitizer: three of its seven tests finished clean before the timeout).
# Each test in its own sanitizer process, four at a time. Carry .device (pack.sh).
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O"
export SDPA_CACHE_DIR=/tmp/kcache-bin
t0=$SECONDS; say() { echo "$* [$((SECONDS - t0))s]" | tee -a "$O/summary.txt"; }
nvidia-smi -L > "$O/gpu.txt"
T=.device/tests/gpu_nonfinite-test
# Warm the kernel cache outside the sanitizer, so its time goes to the kernels.
timeout 120 $T --include-ignored --test-threads 4 > "$O/plain.log" 2>&1
say "gpu_nonfinite rc=$? $(grep -E '^test result' "$O/plain.log" | tail -1)"
names=$($T --list --include-ignored 2>/dev/null | sed -n 's/: test$//p')
for n in $names; do
  ( timeout 420 compute-sanitizer --tool memcheck --error-exitcode 9 $T --include-ignored --exact "$n" \
      > "$O/memcheck-$n.log" 2>&1; echo "rc=$?" >> "$O/memcheck-$n.log" ) &
  while [ "$(jobs -rp | wc -l)" -ge 4 ]; do sleep 2; done
done
wait
for n in $names; do
  say "memcheck $n: $(grep -E 'ERROR SUMMARY' "$O/memcheck-$n.log" | tail -1) $(tail -1 "$O/memcheck-$n.log") $(grep -E '^test result' "$O/memcheck-$n.log" | cut -c1-40)"
done
cd "$O" && tar czf logs.tgz memcheck-*.log plain.log && rm -f memcheck-*.log plain.log
