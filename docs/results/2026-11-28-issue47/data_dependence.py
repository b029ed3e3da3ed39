"""Round 6: is fp8_sdpa's GPU time data-dependent? The same kernel timed from Python (CUDA
graph of 20 calls, so no host work between kernels) on torch.randn inputs, on the lab bench's
periodic pattern (65,536 normal values repeated with index (i * 7 + salt) mod 65,536, as
`sdpa-lab bench` builds its inputs), and on zeros. B16 H16 D128 bf16."""

import statistics
import sys
import time

import torch

import fp8_sdpa


def pattern(n, salt, g):
    base = torch.randn(1 << 16, generator=g, device="cuda")
    idx = (torch.arange(n, device="cuda", dtype=torch.int64) * 7 + salt) % (1 << 16)
    return base[idx]


def timed(q, k, v, causal):
    call = lambda: fp8_sdpa.flash_attn_func(q, k, v, causal=causal)  # noqa: E731
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    cg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cg):
        for _ in range(20):
            call()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:
        cg.replay()
        torch.cuda.synchronize()
    times = []
    for _ in range(15):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        cg.replay()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / 20)
    return statistics.median(times)


def main():
    fp8_sdpa.set_value_checks(False)
    g = torch.Generator(device="cuda").manual_seed(0)
    print("| S | causal | randn us | lab pattern us | zeros us | randn / pattern |\n|---|---|---|---|---|---|")
    for s, causal in [(1024, False), (4096, False), (1024, True), (4096, True), (16384, True)]:
        shape = (16, s, 16, 128)
        n = 16 * s * 16 * 128
        inputs = {
            "randn": [torch.randn(shape, generator=g, device="cuda").bfloat16() for _ in range(3)],
            "pattern": [pattern(n, salt, g).view(shape).bfloat16() for salt in (1, 2, 3)],
            "zeros": [torch.zeros(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)],
        }
        t = {name: timed(*qkv, causal) for name, qkv in inputs.items()}
        print(f"| {s} | {causal} | {t['randn']:.1f} | {t['pattern']:.1f} | {t['zeros']:.1f} "
              f"| {t['randn'] / t['pattern']:.3f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
