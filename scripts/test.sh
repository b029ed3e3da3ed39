#!/usr/bin/env bash
# The project's test command. Does its own set-up, then runs every check CI runs:
#   1. NVRTC: if no libnvrtc.so.13 is found, installs the pip package nvidia-cuda-nvrtc (13.0.x,
#      matching the GPU machines' CUDA 13.0 driver) into .nvrtc/ and points the project at it;
#   2. cargo fmt --check, clippy with warnings as errors;
#   3. cargo test (GPU tests are #[ignore]d with a reason; pass --gpu to include them);
#   4. sdpa-lab check for sm_80 and sm_90a (compiles every registered kernel, resource gates),
#      in the background, beside the test run and steps 5-7;
#   5. cargo package of every crate (metadata, versioned dependencies, the files each ships;
#      `cargo package --workspace` without --no-verify also builds each from its package);
#   6. python/test.sh: the Python package (maturin wheel in target/py/) and its CPU-side tests;
#   7. fuzz/run.sh: the fuzz targets built with libFuzzer's instrumentation on stable Rust, each
#      run for SDPA_FUZZ_SECONDS seconds (default 3; 0 builds them only). Their checks also run
#      as property tests in step 3 (tests/fuzz_props.rs, tests/fuzz_attn_io.rs).
# Usage: scripts/test.sh [--gpu]
set -euo pipefail
cd "$(dirname "$0")/.."

gpu=0
for a in "$@"; do
  case "$a" in
    --gpu) gpu=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a (see --help)" >&2; exit 2 ;;
  esac
done

nvrtc_found() {
  if [ -n "${SDPA_NVRTC_PATH:-}" ] && [ -e "$SDPA_NVRTC_PATH" ]; then return 0; fi
  if [ -e .nvrtc/nvidia/cu13/lib/libnvrtc.so.13 ]; then
    export SDPA_NVRTC_PATH="$PWD/.nvrtc/nvidia/cu13/lib"; return 0
  fi
  ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so\.13' && return 0
  for d in /usr/local/cuda/lib64 ${CUDA_HOME:+$CUDA_HOME/lib64}; do
    if [ -e "$d/libnvrtc.so.13" ]; then export SDPA_NVRTC_PATH="$d"; return 0; fi
  done
  return 1
}

if ! nvrtc_found; then
  echo "==> NVRTC not found: installing nvidia-cuda-nvrtc==13.0.88 into .nvrtc/"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target .nvrtc 'nvidia-cuda-nvrtc==13.0.88'
  export SDPA_NVRTC_PATH="$PWD/.nvrtc/nvidia/cu13/lib"
fi
echo "==> NVRTC: ${SDPA_NVRTC_PATH:-loader path}"
# A project-local kernel cache keeps test runs independent of the user's cache.
export SDPA_CACHE_DIR="${SDPA_CACHE_DIR:-$PWD/target/kernel-cache}"

# Each step's wall time, printed at the end (where CI's minutes go).
times=()
step() { times+=("$(printf '%4ds  %s' $((SECONDS - t_step)) "$cur")"); cur=$1; t_step=$SECONDS; echo "==> $1"; }
cur=setup; t_step=$SECONDS
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
step "cargo test: build"
log=$(mktemp)
check_log=$(mktemp)
check_pid=
trap '[ -z "$check_pid" ] || kill "$check_pid" 2>/dev/null || true; rm -f "$log" "$check_log"' EXIT
cargo test --workspace --no-run --quiet
# The kernel check (NVRTC, about half of this command's CPU time) runs beside the tests and
# the package, Python and fuzz steps, which leave a core idle part of the time (single-
# threaded tests, linking, pytest, the fuzz runs); its log is printed when it ends. It runs
# the lab's binary that the test build made (its integration tests run it; building the
# package alone would recompile it with other features).
step "sdpa-lab check --arch sm_80,sm_90a (started, runs beside the next steps)"
[ -x target/debug/sdpa-lab ] || cargo build --quiet -p sdpa-lab
t_check=$SECONDS
( target/debug/sdpa-lab check --arch sm_80,sm_90a --summary >"$check_log" 2>&1; echo "rc=$?" >>"$check_log"
  echo "elapsed=$((SECONDS - t_check))" >>"$check_log" ) &
check_pid=$!
step "cargo test: run"
if [ "$gpu" = 1 ]; then
  cargo test --workspace -- --include-ignored 2>&1 | tee "$log"
else
  cargo test --workspace 2>&1 | tee "$log"
fi
step "cargo package --workspace"
cargo package --workspace --no-verify --allow-dirty --quiet
step "Python package (python/test.sh)"
python/test.sh
step "fuzz targets (fuzz/): build, then ${SDPA_FUZZ_SECONDS:-3}s of each"
fuzz/run.sh "${SDPA_FUZZ_SECONDS:-3}"
step "sdpa-lab check: waiting for it"
wait "$check_pid" || true
grep -v '^rc=\|^elapsed=' "$check_log"
step done
printf "%s\n" "${times[@]:1}"
echo "   (the check itself took $(sed -n 's/^elapsed=//p' "$check_log")s, beside the steps above)"
grep -qx 'rc=0' "$check_log" || { echo "sdpa-lab check failed (its report is above)" >&2; exit 1; }
# One closing line for the whole test suite (cargo prints one per test binary, the last
# being the doc-tests').
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
     END { printf "(%d GPU tests ignored here; scripts/test.sh --gpu runs them on a GPU machine)\ntests: %d passed, %d failed\n", g, p, f }' "$log"
