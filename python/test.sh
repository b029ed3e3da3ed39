#!/usr/bin/env bash
# Builds the fp8-sdpa wheel (maturin, abi3) into a virtual environment under target/py/ and
# runs the package's CPU-side tests (python/tests/: import, argument errors, dtype and layout
# mapping; no GPU and no torch needed).
# Usage: python/test.sh [--release] [pytest args...]
#   --release   build the wheel optimized (what a user installs; slower to build)
# Environment: PYTHON (default python3) makes the venv; FP8_SDPA_VENV overrides its path.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=()
if [ "${1:-}" = "--release" ]; then profile=(--release); shift; fi

venv="${FP8_SDPA_VENV:-$PWD/target/py/venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "==> venv: $venv"
  "${PYTHON:-python3}" -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import maturin, pytest' 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'maturin>=1.9.4,<2' pytest
fi

echo "==> maturin build ${profile[*]:-(debug)}"
wheels="$PWD/target/py/wheels"
rm -rf "$wheels"
# From python/, where pyproject.toml names the crate (crates/fp8-sdpa-py).
(cd python && "$venv/bin/maturin" build --quiet "${profile[@]}" -o "$wheels" \
  --interpreter "$venv/bin/python")
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
  --no-deps "$wheels"/fp8_sdpa-*.whl

echo "==> pytest python/tests"
# From python/tests, so `import fp8_sdpa` is the installed wheel, not the source folder.
cd python/tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
