#!/usr/bin/env bash
# Builds fp8-sdpa-candle with its `cuda` feature on a machine without a GPU or CUDA toolkit,
# for carrying the binaries to a GPU machine (docs/design-candle.md, "Building the cuda
# feature"). candle's `cuda` feature needs nvcc at build time (candle-kernels) and links
# -lcuda -lnvrtc -lcublas -lcublasLt -lcurand -lcudart; all come from PyPI wheels:
#   1. installs the CUDA 13.0 wheels (nvcc, crt, nvvm, runtime, cccl, cublas, curand, nvrtc)
#      into .nvcc/ (git-ignored) unless present;
#   2. adds the unversioned lib*.so links the linker wants and a link-only libcuda.so stub
#      (SONAME libcuda.so.1, generated from cudarc's driver bindings: no wheel ships one);
#   3. builds the crate's test binaries and examples with `--features cuda` for
#      CUDA_COMPUTE_CAP (default 90: H100/H200), with the host code of candle-core, cudarc,
#      half, float8, fp8-sdpa and fp8-sdpa-candle at opt-level 3 (the examples time per-token
#      host work; per package, so that candle-kernels' nvcc build is not redone), copies them
#      to .device/candle/ and packs the GPU test and the examples into .device/candle.tar.xz.
# CARGO_TARGET_DIR (default target/candle-cuda) may point at another worktree's build to
# reuse its candle-kernels; .nvcc may be a symlink (its resolved path is used, so CUDA_HOME
# stays the same string across worktrees and cudarc's build script does not rerun).
# At run time the binaries need the real libcuda.so.1 (the driver) and libnvrtc.so.13,
# libcublas.so.13, libcublasLt.so.13, libcurand.so.10, libcudart.so.13 on the loader path
# (LD_LIBRARY_PATH), e.g. from PyTorch's nvidia/cu13/lib.
# Usage: scripts/build-candle-cuda.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cuda="$root/.nvcc/nvidia/cu13"

if [ ! -x "$cuda/bin/nvcc" ]; then
  echo "==> installing the CUDA 13.0 wheels into .nvcc/"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target .nvcc \
    'nvidia-cuda-nvcc==13.0.88' 'nvidia-cuda-crt==13.0.88' 'nvidia-nvvm==13.0.88' \
    'nvidia-cuda-runtime==13.0.96' 'nvidia-cuda-cccl==13.0.85' 'nvidia-cublas==13.0.2.14' \
    'nvidia-curand==10.4.0.35' 'nvidia-cuda-nvrtc==13.0.88'
fi

echo "==> link libraries in $cuda/lib"
for l in nvrtc.so.13 cublas.so.13 cublasLt.so.13 curand.so.10 cudart.so.13; do
  ln -sf "lib$l" "$cuda/lib/lib${l%.so.*}.so"
done
stub="$cuda/lib/stubs/libcuda.so"
if [ ! -e "$stub" ]; then
  # Every driver entry point cudarc declares, each returning CUDA_ERROR_UNKNOWN: enough to
  # link; the loader binds the real driver by the SONAME at run time.
  mkdir -p "$cuda/lib/stubs"
  bindings=$(cargo metadata --format-version 1 --manifest-path "$root/Cargo.toml" |
    python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"]=="cudarc").rsplit("/",1)[0])')/src/driver/sys/mod.rs
  grep -oE '^\s+fn cu[A-Za-z0-9_]+\(' "$bindings" | sed -E 's/^\s+fn (cu[A-Za-z0-9_]+)\(/\1/' | sort -u |
    awk '{ printf "int %s(void) { return 999; }\n", $1 }' > "$cuda/lib/stubs/libcuda_stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stub" "$cuda/lib/stubs/libcuda_stub.c"
fi

cuda=$(cd "$cuda" && pwd -P)
export PATH="$cuda/bin:$PATH"
export CUDA_HOME="$cuda"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/candle-cuda}"
# No debug info: the binaries travel (64 MiB carry limit).
export CARGO_PROFILE_DEV_DEBUG=0
echo "==> nvcc $(nvcc --version | tail -1), compute cap $CUDA_COMPUTE_CAP, target $CARGO_TARGET_DIR"

opt=()
for p in candle-core cudarc half float8 fp8-sdpa fp8-sdpa-candle; do
  opt+=(--config "profile.dev.package.$p.opt-level=3")
done

out="$root/.device/candle"
mkdir -p "$out"
cargo test "${opt[@]}" -p fp8-sdpa-candle --features cuda --no-run --message-format=json-render-diagnostics |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])' > "$out/.tests"
cargo build "${opt[@]}" -p fp8-sdpa-candle --features cuda --examples
while read -r name exe; do
  cp "$exe" "$out/test-$name"
done < "$out/.tests"
rm -f "$out/.tests"
for e in crates/fp8-sdpa-candle/examples/*.rs; do
  n=$(basename "$e" .rs)
  cp "$CARGO_TARGET_DIR/debug/examples/$n" "$out/example-$n"
done
# The binaries embed candle's kernels (~56 MB each); xz packs the GPU test and the examples
# to ~8 MB each, small enough to carry (64 MiB limit).
tar -cJf "$root/.device/candle.tar.xz" -C "$out" test-gpu $(cd "$out" && ls example-*)
echo "==> built into .device/candle/ and packed the GPU test and examples into .device/candle.tar.xz:"
ls -la "$out" "$root/.device/candle.tar.xz"
echo "==> shared libraries the binaries need at run time:"
readelf -d "$out"/example-* | awk '/NEEDED/ { print $5 }' | sort -u
