#!/bin/bash
R=/tmp/r158
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
rm -f $R/s.json $R/x.json
tar czf $OUT/r158.tgz -C $R .
