#!/bin/bash
# Round 26, run 145 (one GPU): every test binary of the final commit with its GPU tests
# (--include-ignored), built here by ../shared/device/pack.sh.
export SDPA_CACHE_DIR=$PWD/artifacts/cache PATH=$PWD/.device/bin:$PATH
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name --format=csv,noheader
fail=0
for t in .device/tests/*; do
  n=$(basename $t)
  timeout -s KILL 200 $t --include-ignored > $OUT/$n.log 2>&1; rc=$?
  echo "== $n rc=$rc :: $(grep -E '^test result' $OUT/$n.log | tail -1)"
  [ $rc = 0 ] || { fail=1; grep -E "FAILED|panicked" $OUT/$n.log | head -5; }
done
echo "all rc=$fail"
