"""GPU time of fp8_sdpa through Python against `sdpa-lab bench` on the same shapes.

    sdpa-lab bench --suite fa --quick --precision bf16 --out bench.json
    python examples/python/lab_vs_python.py bench.json

For every fp8-sdpa row of a 16-bit bench JSON, runs the same problem through
`fp8_sdpa.flash_attn_func` (dispatch's kernel, as the lab's row unless it named a variant) and
times each call with CUDA events under the lab's protocol (short bursts), and once more
sustained (long enough to reach the board's power limit, where the clock drops). Prints the
lab's median, Python's and their ratios, and the kernel each ran; the host cost is hidden
behind the kernel on these shapes, so the ratios are the GPU time's.
"""

import json
import statistics
import sys
import time

import torch

import fp8_sdpa


class _Recorder:
    """fp8_sdpa's native module, keeping the key of the kernel run_dense launched."""

    def __init__(self, native):
        self.native, self.key = native, None

    def __getattr__(self, name):
        return getattr(self.native, name)

    def run_dense(self, *args):
        self.key = self.native.run_dense(*args)
        return self.key


def python_median_us(shape, causal, dtype, sustained=False):
    """Median GPU time of one eager call, per-call CUDA events. The lab's protocol (default):
    10 warm-up calls, then 100 timed calls in batches of 20 with a synchronize after each
    batch, so the GPU works in short bursts. `sustained`: 300 ms of warm-up calls, then three
    rounds of 100 back to back, long enough to reach the board's power limit."""
    b, sq, skv = shape["batch"], shape["seq_q"], shape["seq_kv"]
    hq, hkv, d = shape["heads_q"], shape["heads_kv"], shape["head_dim"]
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(b, skv, hkv, d, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(b, skv, hkv, d, device="cuda", dtype=dtype, generator=g)
    call = lambda: fp8_sdpa.flash_attn_func(q, k, v, causal=causal)  # noqa: E731
    call()
    torch.cuda.synchronize()
    if sustained:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.3:
            for _ in range(10):
                call()
            torch.cuda.synchronize()
        batches, batch = 15, 20
    else:
        for _ in range(10):
            call()
        torch.cuda.synchronize()
        batches, batch = 5, 20
    times = []
    for _ in range(batches):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(batch)]
        for start, end in events:
            start.record()
            call()
            end.record()
        torch.cuda.synchronize()
        times += [s.elapsed_time(e) * 1e3 for s, e in events]
    return statistics.median(times)


def main():
    import fp8_sdpa.interface as interface

    rec = _Recorder(interface._native)
    interface._native = rec
    rows = json.load(open(sys.argv[1]))["rows"]
    fp8_sdpa.set_value_checks(False)
    print("| case | precision | lab median us | Python median us | Python / lab | sustained Python / lab "
          "| kernels (lab, Python) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("implementation") != "fp8-sdpa" or r.get("status") != "ok":
            continue
        if r["precision"] not in ("bf16", "f16"):
            continue
        dtype = torch.bfloat16 if r["precision"] == "bf16" else torch.float16
        lab = r["stats"]["median_us"]
        py = python_median_us(r["shape"], r["causal"], dtype)
        key = rec.key
        sustained = python_median_us(r["shape"], r["causal"], dtype, sustained=True)
        same = "same" if key.split("/")[0] == r.get("backend") else f"{r.get('backend')}, {key}"
        print(f"| {r['case']} | {r['precision']} | {lab:.1f} | {py:.1f} | {py / lab:.3f} | {sustained / lab:.3f} "
              f"| {same} |")


if __name__ == "__main__":
    main()
