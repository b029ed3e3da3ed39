#!/bin/bash
# Round 30, run 179 (one GPU): the review mend (UseCursor beside the scheduler, one
# griddep_setup_done, the launch's parameter pointers in an array instead of a Vec; SASS of all
# 112 Hopper CUBINs identical before and after): every GPU test on the mended build.
export SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name --format=csv,noheader
for t in .device/tests/*; do
  timeout -s KILL 240 $t --ignored > /tmp/t.log 2>&1; rc=$?
  echo "== $(basename $t) rc=$rc: $(grep -E '^test result' /tmp/t.log | tail -1)"
  grep -E "FAILED|panicked" /tmp/t.log | head -4
done
