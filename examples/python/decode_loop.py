"""Swap FlashAttention-3 for fp8_sdpa in a decoding loop, and time both.

A decoder's attention, on its own: LAYERS layers each attend one new query per sequence over
a KV cache that grows by a token a step (`flash_attn_with_kvcache`, the same call for both
libraries), with a 16-bit cache (bf16 by default: the fa3-fwd wheel is built without fp16)
and, for fp8_sdpa only, an E4M3 cache (FA3's FP8 path takes E4M3 Q too). Prints tokens per second for each, and the host time of one eager call on a
tiny shape (where the launch path is the cost), eager and replayed from a CUDA graph.

    python examples/python/decode_loop.py [--batch 8] [--context 4096] [--steps 64] [--dtype bf16]

FA3 is used when `flash_attn_interface` (or the `fa3_fwd_interface` wheel) imports; its
rows say so otherwise.
"""

import argparse
import importlib
import time

import torch

import fp8_sdpa


def fa3():
    for name in ("flash_attn_interface", "fa3_fwd_interface"):
        try:
            return importlib.import_module(name)
        except ImportError:
            pass
    return None


def decode(attn, batch, context, steps, layers, heads, heads_kv, dim, dtype, kv_fp8=False):
    """Tokens per second of `steps` decoding steps of `layers` attention calls each."""
    torch.manual_seed(0)
    dev = "cuda"
    cap = context + steps
    q = torch.randn(batch, 1, heads, dim, device=dev, dtype=dtype)
    caches = []
    for _ in range(layers):
        k = torch.randn(batch, cap, heads_kv, dim, device=dev, dtype=dtype)
        v = torch.randn(batch, cap, heads_kv, dim, device=dev, dtype=dtype)
        if kv_fp8:
            (k, kd), (v, vd) = fp8_sdpa.quantize_e4m3(k), fp8_sdpa.quantize_e4m3(v)
            caches.append((k, v, {"k_descale": kd, "v_descale": vd}))
        else:
            caches.append((k, v, {}))
    lens = torch.full((batch,), context, device=dev, dtype=torch.int32)

    def step():
        for k, v, extra in caches:
            attn(q, k, v, cache_seqlens=lens, causal=True, **extra)
        lens.add_(1)

    step()  # compiles and warms up
    lens.fill_(context)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return batch * steps / (time.perf_counter() - t0)


def host_us(attn, dt, calls=2000, graph=False):
    """Microseconds per call of a tiny decode call (batch 1, 128 keys): eager, or replays of
    a CUDA graph of `calls` calls."""
    dev = "cuda"
    q = torch.randn(1, 1, 8, 64, device=dev, dtype=dt)
    k = torch.randn(1, 128, 8, 64, device=dev, dtype=dt)
    v = torch.randn(1, 128, 8, 64, device=dev, dtype=dt)
    lens = torch.full((1,), 128, device=dev, dtype=torch.int32)
    run = lambda: attn(q, k, v, cache_seqlens=lens, causal=True)  # noqa: E731
    for _ in range(10):
        run()
    torch.cuda.synchronize()
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            run()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                run()
        g.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
    else:
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    a = ap.parse_args()
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    shape = dict(batch=a.batch, context=a.context, steps=a.steps, layers=a.layers, heads=32, heads_kv=8, dim=128)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; batch {a.batch}, context {a.context}, "
          f"{a.layers} layers, 32 query / 8 kv heads, D128")
    fa = fa3()
    rows = [(f"fp8_sdpa {a.dtype} cache", lambda: decode(fp8_sdpa.flash_attn_with_kvcache, dtype=dt, **shape)),
            ("fp8_sdpa E4M3 cache", lambda: decode(fp8_sdpa.flash_attn_with_kvcache, dtype=dt,
                                                   kv_fp8=True, **shape))]
    if fa is not None:
        rows.append((f"FA3 {a.dtype} cache", lambda: decode(fa.flash_attn_with_kvcache, dtype=dt, **shape)))
    fp8_sdpa.set_value_checks(False)  # a serving loop trusts its own lengths (the kernels clamp)
    for name, f in rows:
        print(f"  {name:22s} {f():10.0f} tokens/s")
    if fa is None:
        print("  FA3                    not importable here")
    for name, attn in [("fp8_sdpa", fp8_sdpa.flash_attn_with_kvcache)] + (
            [("FA3", fa.flash_attn_with_kvcache)] if fa is not None else []):
        print(f"  host per call, {name:8s}: eager {host_us(attn, dt):6.1f} us, "
              f"CUDA graph {host_us(attn, dt, graph=True):6.1f} us")


if __name__ == "__main__":
    main()
