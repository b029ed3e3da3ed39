#!/bin/bash
# Round 31, run 184 (one GPU): issue 27's done-when on the landing build: verify of every
# registered decode variant (quick shapes, two seeds, contiguous, varlen and paged).
mkdir -p /tmp/bin && gunzip -c .ab/sdpa-lab.gz > /tmp/bin/sdpa-lab && chmod +x /tmp/bin/sdpa-lab
export PATH=/tmp/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
T0=$(date +%s); el() { echo "== $1 $(( $(date +%s)-T0 ))s"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout -s KILL 560 sdpa-lab verify --filter decode --quick --seeds 2 --no-codec --json /tmp/v.json > $OUT/verify_decode.log 2>&1; el "verify decode rc=$?"
grep -E "verify:" $OUT/verify_decode.log | tail -1
grep -E "^decode" $OUT/verify_decode.log | awk '{print $1}' | sed 's#/.*##' | sort | uniq -c
grep -iE "fail" $OUT/verify_decode.log | grep -v "^spec" | head -8
