#!/bin/bash
R=/tmp/r156
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
rm -f $R/s.json $R/x.json
tar czf $OUT/r156.tgz -C $R .
