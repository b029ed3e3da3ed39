#!/bin/bash
# Round 30, run 175 (one GPU): run 174's chained test passed on the control build too (the
# mission shape's 6 us call ended before the host had submitted the second: no overlap, so no
# test). Its second call now reads the first's output as K and V (every block reads all of it),
# on a 40 us-per-wave, two-wave grid. The test on the landing build, then on the control build
# (no griddepcontrol.wait in the Hopper kernel), where it must fail.
export SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name --format=csv,noheader
for b in tests ctl; do
  timeout -s KILL 150 .device/$b/gpu-test --ignored chained_hopper > /tmp/c.log 2>&1; rc=$?
  echo "== $b rc=$rc: $(grep -E '^test result' /tmp/c.log | tail -1)"
  grep -E "panicked|round" /tmp/c.log | head -3 | cut -c1-400
done
