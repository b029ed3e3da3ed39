#!/bin/bash
# Round 22, run 115: `sdpa-lab repro` (mission and fa suites, quick) on the Hopper defaults,
# with the peers PyTorch's three SDPA backends and FlashAttention-3 (the fa3-fwd 0.0.3 wheel,
# carried in .whl). The repro's verify stage covers every registered spec, the Hopper ones
# after the review mend of hopper.cu (17cff8c) included.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export PATH=$PWD/.device/bin:$PATH SDPA_CACHE_DIR=$PWD/artifacts/cache
mkdir -p artifacts/cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
python3 -c "import fa3_fwd_interface as f; print('fa3 imports:', f.__file__)" 2>&1 | tail -1
T0=$(date +%s)
timeout 560 sdpa-lab repro --out $OUT/repro > $OUT/repro.log 2>&1; rc=$?
echo "repro rc=$rc $(( $(date +%s)-T0 ))s"
tail -25 $OUT/repro.log
rm -rf $OUT/repro/plots $OUT/repro/bench.peers/rows.json $OUT/repro/cache
python3 docs/results/2026-11-24-h100-hopper-round21/table.py $OUT/repro/bench.json 2>&1 | tail -40
