#!/bin/bash
# Round 25, run 134: `sdpa-lab repro --suite mission,fa,fp8` (quick grids, peers with FlashAttention-3, the
# short tune, the profile stage) with the round-25 binary (step d, FP8 Hopper), in its own session so that it can
# outlive this command (the device tool's 10-minute limit); run 135 waits for it and packs
# the artifacts.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache PYTHONPATH=/tmp/site
mkdir -p artifacts/cache /tmp/repro
setsid nohup bash -c "/usr/bin/time -v sdpa-lab repro --suite mission,fa,fp8 --out /tmp/repro/art > /tmp/repro/repro.log 2>&1; echo rc=\$? > /tmp/repro/done" > /dev/null 2>&1 < /dev/null &
sleep 560; tail -4 /tmp/repro/repro.log
