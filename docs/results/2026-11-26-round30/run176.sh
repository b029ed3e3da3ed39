#!/bin/bash
# Round 30, run 176 (one GPU; its first attempt, with two heads, passed on the control build as
# well: the second call's first blocks read the first head, long written; now one head). Runs
# 174 and 175's chained test passed on the control build too:
# its first call (6 us, then 40 us a wave) ended before the host had submitted the second, so
# the calls never overlapped and the test tested nothing. Now each call takes about a
# millisecond (B1 H2 S 32k D64) and the second pair's output must equal, bit for bit, that of
# a pair with a synchronization between the calls. The test on the landing build, then on the
# control build (no griddepcontrol.wait in the Hopper kernel), where it must fail.
export SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name --format=csv,noheader
for b in tests ctl; do
  timeout -s KILL 150 .device/$b/gpu-test --ignored chained_hopper > /tmp/c.log 2>&1; rc=$?
  echo "== $b rc=$rc: $(grep -E '^test result' /tmp/c.log | tail -1)"
  grep -E "panicked|round" /tmp/c.log | head -3 | cut -c1-400
done
