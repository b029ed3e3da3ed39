#!/bin/bash
# Round 28, run 155 (one GPU): issue 28, where the full-FP8 D128 consumer waits. Nsight Compute
# with source counters (warp stall sampling per SASS instruction) of the D128 S 4k default,
# exported as the SASS source page (CSV).
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache $OUT
B="bench --suite fp8 --quick --precision fp8 --filter d128_s4k --no-ceilings --iters 100"
timeout -s KILL 240 ncu --clock-control none -k regex:sdpa_hopper --launch-skip 10 --launch-count 1 --section SourceCounters --section WarpStateStats -o /tmp/prof sdpa-lab $B --out /tmp/x.json > $OUT/ncu.log 2>&1; echo "ncu rc=$?"
tail -3 $OUT/ncu.log
ncu --import /tmp/prof.ncu-rep --page source --print-source sass --csv > $OUT/sass.csv 2> $OUT/imp.err; echo "import rc=$?"; head -c 600 $OUT/sass.csv; echo; wc -l $OUT/sass.csv; head -3 $OUT/imp.err
gzip -f $OUT/sass.csv
