#!/usr/bin/env bash
# Issue 44, first GPU round: every GPU test (the soundness tests included) and verify of the
# FP8-KV Hopper tiles the decoder rule now accepts. Run from the repo root on the device with
# .device/ carried (../shared/device/pack.sh). Logs under $OUT.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/logs; mkdir -p "$OUT" "$FINAL"
export SDPA_CACHE_DIR=/tmp/kcache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
nvidia-smi -L | tee "$OUT/gpu.txt"
lab=.device/bin/sdpa-lab
summary=()
for t in .device/tests/*; do
  case "$t" in *cp_ring_gpu*) continue ;; esac  # two GPUs: run2-x2.sh
  if [ -n "${ONLY:-}" ] && ! grep -qE "$ONLY" <<< "$t"; then continue; fi
  n=$(basename "$t")
  timeout 240 "$t" --include-ignored --test-threads 4 > "$OUT/test-$n.log" 2>&1
  rc=$?
  line=$(grep -E '^test result' "$OUT/test-$n.log" | tail -1)
  summary+=("$n rc=$rc $line")
  [ $rc -ne 0 ] && grep -E '^---- |panicked|FAILED' "$OUT/test-$n.log" | head -20
done > "$OUT/failures.txt"
for v in hopper.m128.n{48,80,96,112}.w12.s2.b1.w4ogex hopper.m128.n80.w12.s2.b1.w4pogex; do
  {
    timeout 200 $lab verify --quick --seeds 2 --variant $v --filter fp8kv --json "$OUT/verify-$v.json" > "$OUT/verify-$v.log" 2>&1
    summary+=("verify $v rc=$? $(tail -1 "$OUT/verify-$v.log")")
  }
done
printf '%s\n' "${summary[@]}" > "$OUT/summary.txt"
tar czf "$FINAL/logs.tar.gz" -C /tmp logs
cat "$OUT/failures.txt" "$OUT/summary.txt"
