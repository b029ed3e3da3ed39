#!/bin/bash
# Round 29, run 168 (one GPU): every GPU test (--ignored) of the build that dispatches FP8-KV at
# D64/D128 to the Hopper family on sm_90a (commit 693b157). First call without SDPA_LAB_BIN: the
# four sdpa-lab tests could not find the CLI (cargo's build path); rerun with it: all 25 pass.
export SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab  # the sdpa-lab tests call the CLI
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name --format=csv,noheader
for t in .device/tests/*; do
  timeout -s KILL 240 $t --ignored > /tmp/t.log 2>&1; rc=$?
  echo "== $(basename $t) rc=$rc: $(grep -E '^test result' /tmp/t.log | tail -1)"
  grep -E "FAILED|panicked" /tmp/t.log | head -4
done
