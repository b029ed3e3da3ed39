#!/usr/bin/env bash
# Issue 44, GPU round 2b: shipped defaults before (cf86538, .device/base) and after (.device/bin),
# same run, fa / fp8 / decode quick suites, alternating builds; `compare` tables last.
set -uo pipefail
FINAL=${OUT:-/tmp/out}; OUT=/tmp/bench; mkdir -p "$OUT" "$FINAL"

t0=$SECONDS
run() {  # build suite args...
  local b=$1 s=$2; shift 2
  SDPA_CACHE_DIR=/tmp/kcache-$b timeout 150 .device/$b/sdpa-lab bench --suite $s --no-ceilings "$@" --out "$OUT/$s-$b.json" > "$OUT/$s-$b.log" 2>&1
  echo "bench $s $b rc=$? [$((SECONDS - t0))s]"
}
for s in fa fp8 decode; do
  case $s in
    fa) args=(--quick --precision f16,bf16) ;;
    fp8) args=(--quick --precision fp8,fp8kv_f16) ;;
    decode) args=() ;;
  esac
  run base $s "${args[@]}"; run bin $s "${args[@]}"
done
for s in fa fp8 decode; do
  .device/bin/sdpa-lab compare "$OUT/$s-base.json" "$OUT/$s-bin.json" --threshold 3 --out "$OUT/cmp-$s" > "$OUT/cmp-$s.txt" 2>&1
  echo "compare $s rc=$?"
done
tar czf "$FINAL/bench.tar.gz" -C /tmp bench
for s in fa fp8 decode; do echo "== $s"; grep -vE '^\s*$' "$OUT/cmp-$s.txt" | tail -40; done
