#!/bin/bash
R=/tmp/r154
for i in $(seq 1 ${1:-110}); do [ -e $R/all.done ] && break; sleep 5; done
cat $R/log
mkdir -p $OUT/r && cp $R/m_*.json $R/k_*.json $OUT/r/ 2>/dev/null
tar czf $OUT/r154.tgz -C $R . 2>/dev/null
