"""GPU time of fp8_sdpa through Python against `sdpa-lab bench` on the same shapes.

    sdpa-lab bench --suite fa --quick --precision bf16 --out bench.json
    python examples/python/lab_vs_python.py bench.json

For every fp8-sdpa row of a 16-bit bench JSON, runs the same problem through
`fp8_sdpa.flash_attn_func` (dispatch's kernel, as the lab's row unless it named a variant) and
times each call with CUDA events after at least 300 ms of warm-up calls (so the clocks have
ramped as in the lab's run), three rounds of 100 calls. Prints the lab's median, Python's and
their ratio, and the kernel each ran; the host cost is hidden behind the kernel on these
shapes, so the ratio is the GPU time's.
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


def python_median_us(shape, causal, dtype, runs=100, rounds=3, sets=1, graph=False):
    """Median GPU time of one call: per-call CUDA events around eager calls (rotating over
    `sets` copies of the inputs, as the lab's hot mode does), or, with `graph`, replays of a
    CUDA graph of 20 calls divided by 20 (no host work between kernels)."""
    b, sq, skv = shape["batch"], shape["seq_q"], shape["seq_kv"]
    hq, hkv, d = shape["heads_q"], shape["heads_kv"], shape["head_dim"]
    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = [(torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=g),
               torch.randn(b, skv, hkv, d, device="cuda", dtype=dtype, generator=g),
               torch.randn(b, skv, hkv, d, device="cuda", dtype=dtype, generator=g)) for _ in range(sets)]
    i = [0]

    def call():
        q, k, v = inputs[i[0] % sets]
        i[0] += 1
        return fp8_sdpa.flash_attn_func(q, k, v, causal=causal)

    per = 1
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call()
        torch.cuda.current_stream().wait_stream(side)
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            for _ in range(20):
                call()
        step, per = cg.replay, 20
    else:
        step = call
    step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(runs // per if graph else runs)]
        for start, end in events:
            start.record()
            step()
            end.record()
        torch.cuda.synchronize()
        times += [s.elapsed_time(e) * 1e3 / per for s, e in events]
    return statistics.median(times)


def main():
    import fp8_sdpa.interface as interface

    rec = _Recorder(interface._native)
    interface._native = rec
    rows = json.load(open(sys.argv[1]))["rows"]
    fp8_sdpa.set_value_checks(False)
    print("| case | precision | lab median us | Python median us | Python / lab | 2 input sets / lab "
          "| CUDA graph / lab | kernels (lab, Python) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("implementation") != "fp8-sdpa" or r.get("status") != "ok":
            continue
        if r["precision"] not in ("bf16", "f16"):
            continue
        dtype = torch.bfloat16 if r["precision"] == "bf16" else torch.float16
        lab = r["stats"]["median_us"]
        py = python_median_us(r["shape"], r["causal"], dtype)
        key = rec.key
        two = python_median_us(r["shape"], r["causal"], dtype, sets=2)
        graph = python_median_us(r["shape"], r["causal"], dtype, graph=True)
        same = "same" if key.split("/")[0] == r.get("backend") else f"{r.get('backend')}, {key}"
        print(f"| {r['case']} | {r['precision']} | {lab:.1f} | {py:.1f} | {py / lab:.3f} | {two / lab:.3f} "
              f"| {graph / lab:.3f} | {same} |")


if __name__ == "__main__":
    main()
