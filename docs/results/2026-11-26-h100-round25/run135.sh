#!/bin/bash
# Round 25, run 135: waits for run 134's repro and packs its artifacts into $OUT.
while [ ! -f /tmp/repro/done ]; do sleep 5; done
cat /tmp/repro/done; grep -E "Elapsed|Maximum resident" /tmp/repro/repro.log
tar czf $OUT/repro.tgz -C /tmp/repro art repro.log
tail -30 /tmp/repro/repro.log
