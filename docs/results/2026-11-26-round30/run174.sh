#!/bin/bash
# Round 30, run 174 (one GPU): the landing build of programmatic dependent launch (Hopper
# family only; the decode family's PDL left, run 172). Every GPU test, the new one included
# (two Hopper calls back to back, the second reading the first's output, NaN-poisoned before
# each round), and that test against a control build whose Hopper kernel does not wait
# (griddepcontrol.wait removed, .device/ctl): it must fail there, or the test proves nothing.
export SDPA_CACHE_DIR=$PWD/artifacts/cache SDPA_LAB_BIN=$PWD/.device/bin/sdpa-lab
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name --format=csv,noheader
for t in .device/tests/*; do
  timeout -s KILL 240 $t --ignored > /tmp/t.log 2>&1; rc=$?
  echo "== $(basename $t) rc=$rc: $(grep -E '^test result' /tmp/t.log | tail -1)"
  grep -E "FAILED|panicked" /tmp/t.log | head -4
done
timeout -s KILL 120 .device/ctl/gpu-test --ignored chained_hopper > /tmp/c.log 2>&1; rc=$?
echo "== control (no wait) rc=$rc: $(grep -E '^test result' /tmp/c.log | tail -1)"
grep -E "panicked|round" /tmp/c.log | head -3 | cut -c1-300
