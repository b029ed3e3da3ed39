#!/bin/bash
# Polls run 153's detached job; copies its outputs to $OUT when it is done.
R=/tmp/r153
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
mkdir -p $OUT/run153 && cp $R/*.json $R/*.log $OUT/run153/ 2>/dev/null
rm -f $OUT/run153/s.json
