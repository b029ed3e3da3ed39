#!/usr/bin/env bash
# The new default for 16-bit D128 causal S <= 1k on sm_90a (hopper.m128.n128.w12.s2.b1.w4pogex):
# verify of its D128 causal classes, then memcheck and racecheck of the same run.
set -uo pipefail
O=${OUT:-/tmp/out}; mkdir -p "$O/logs"; R=.device/r4; L=$O/logs
mkdir -p /tmp/bin && gunzip -c $R/sdpa-lab.gz > /tmp/bin/sdpa-lab && chmod +x /tmp/bin/sdpa-lab
export SDPA_CACHE_DIR=/tmp/kc
V="--variant hopper.m128.n128.w12.s2.b1.w4pogex --filter 16/d128/causal --no-codec"
timeout -s KILL 120 /tmp/bin/sdpa-lab verify $V --json $L/verify.json > $L/verify.log 2>&1; echo "verify rc=$? $(tail -2 $L/verify.log | head -1)"
timeout -s KILL 200 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/bin/sdpa-lab verify --quick $V --json $L/m.json > $L/memcheck.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' $L/memcheck.log | tail -1)"
timeout -s KILL 200 compute-sanitizer --tool racecheck --error-exitcode 9 /tmp/bin/sdpa-lab verify --quick $V --json $L/r.json > $L/racecheck.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/racecheck.log | tail -1)"
grep -E "^(hopper|spec)" $L/verify.log | head -8
cd $O && tar czf logs.tgz logs
