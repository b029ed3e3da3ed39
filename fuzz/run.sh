#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer's instrumentation on stable Rust and runs each for
# SECONDS seconds (0: build only). Usage: fuzz/run.sh [SECONDS] [TARGET...] (default: 3 seconds,
# every target in fuzz/fuzz_targets/). Failing inputs land in fuzz/artifacts/<target>/, corpora
# in fuzz/corpus/<target>/. scripts/test.sh runs it; fuzz/README.md says what each target checks.
# FUZZ_SEED (default 1) fixes libFuzzer's seed, so a test run explores the same inputs each
# time; FUZZ_SEED=0 lets libFuzzer pick one, for exploring.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-3}"
shift || true
targets=("$@")
if [ ${#targets[@]} = 0 ]; then
  for f in fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

if ! command -v c++ >/dev/null 2>&1 && ! command -v clang++ >/dev/null 2>&1; then
  # libfuzzer-sys compiles libFuzzer, which is C++.
  echo "    no C++ compiler here: the fuzz targets are not built; their checks run as the property tests of cargo test"
  exit 0
fi
host=$(rustc -vV | sed -n 's/^host: //p')
# The flags `cargo fuzz build -s none` passes (cargo-fuzz 0.13: coverage instrumentation,
# cfg(fuzzing), debug assertions and overflow checks), all stable, so neither nightly nor
# cargo-fuzz is needed; --target keeps them off build scripts, as cargo-fuzz does. For runs of
# seconds the build dominates: 16 codegen units instead of its 1, opt-level 1 and no debug
# info (FUZZ_OPT_LEVEL=3 for long explorations) take about a fifth off its CPU time.
flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
flags+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth"
flags+=" -Cdebug-assertions -Ccodegen-units=16"
start=$SECONDS
CARGO_PROFILE_RELEASE_OPT_LEVEL="${FUZZ_OPT_LEVEL:-1}" CARGO_PROFILE_RELEASE_DEBUG="${FUZZ_DEBUG:-0}" \
  RUSTFLAGS="$flags" cargo build --quiet --release --manifest-path fuzz/Cargo.toml --target "$host" --bins
echo "    built in $((SECONDS - start))s"
[ "$secs" = 0 ] && exit 0
# One target per core at a time (each run is single-threaded).
jobs=$(nproc 2>/dev/null || echo 2)
run_one() {
  local t=$1 log="fuzz/artifacts/$1/last-run.log"
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  "fuzz/target/$host/release/$t" -max_total_time="$secs" -seed="${FUZZ_SEED:-1}" -artifact_prefix="fuzz/artifacts/$t/" \
    "fuzz/corpus/$t" >"$log" 2>&1
}
pids=() names=()
failed=()
reap() {  # waits for the oldest run and reports it
  local t=${names[0]}
  if wait "${pids[0]}"; then
    echo "    $t: $(grep -o 'Done [0-9]* runs' "fuzz/artifacts/$t/last-run.log" | sed 's/Done //') in ${secs}s"
  else
    failed+=("$t")
  fi
  pids=("${pids[@]:1}") names=("${names[@]:1}")
}
for t in "${targets[@]}"; do
  [ ${#pids[@]} -ge "$jobs" ] && reap
  run_one "$t" & pids+=($!) names+=("$t")
done
while [ ${#pids[@]} -gt 0 ]; do reap; done
for t in "${failed[@]}"; do
  tail -n 40 "fuzz/artifacts/$t/last-run.log"
  echo "fuzz target $t failed; its input is in fuzz/artifacts/$t/ (fuzz/README.md: replaying)" >&2
done
[ ${#failed[@]} = 0 ] || exit 1
echo "    fuzz build and runs: $((SECONDS - start))s"
