"""GPU time and bandwidth of fp8_sdpa.reshape_and_cache_flash against the bytes it must move, in one run:
a torch copy of the same byte count is the ceiling, and vLLM's fallback written in torch
(index_put of K and V rows, then a cast for an E4M3 cache) is the peer.

    python examples/python/cache_write_bench.py            # prints a table, last
Slots are whole pages in shuffled order (page 16), as an engine's block tables give them.
GB/s counts K and V read, the slots read and the cache rows written, once each.
"""
import torch
import fp8_sdpa

fp8_sdpa.set_value_checks(False)  # timing: no read-back of slots per call


def timed(fn, reps=11, per_graph=20):
    """GPU time of one call: `per_graph` calls captured in a CUDA graph (so the host's cost
    of a call is not what is timed), the median of `reps` replays, divided."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per_graph):
            fn()
    g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[reps // 2] * 1e-3 / per_graph  # seconds


def case(tokens, heads, dim, dtype, fp8, page=16):
    dev = "cuda"
    k = torch.randn(tokens, heads, dim, device=dev, dtype=dtype)
    v = torch.randn(tokens, heads, dim, device=dev, dtype=dtype)
    pages = (tokens + page - 1) // page * 2
    cdt = torch.float8_e4m3fn if fp8 else dtype
    kc = torch.zeros(pages, page, heads, dim, device=dev, dtype=cdt)
    vc = torch.zeros_like(kc)
    order = torch.randperm(pages, device=dev)[: (tokens + page - 1) // page]
    slots = (order[:, None] * page + torch.arange(page, device=dev)[None]).flatten()[:tokens]
    slots = slots.to(torch.int32).contiguous()
    scale = torch.full((heads,), 0.02, device=dev, dtype=torch.float32)
    kind = "fp8" if fp8 else "auto"

    def ours():
        fp8_sdpa.reshape_and_cache_flash(k, v, kc, vc, slots, kind, scale, scale)

    idx = slots.long()

    def torch_peer():
        if fp8:
            kc.view(-1, heads, dim)[idx] = (k / scale[:, None]).to(cdt)
            vc.view(-1, heads, dim)[idx] = (v / scale[:, None]).to(cdt)
        else:
            kc.view(-1, heads, dim)[idx] = k
            vc.view(-1, heads, dim)[idx] = v

    elems = tokens * heads * dim
    moved = 2 * elems * k.element_size() + 2 * elems * kc.element_size() + 4 * tokens
    src = torch.empty(moved // 2, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    t_copy = timed(lambda: dst.copy_(src))
    t_ours, t_peer = timed(ours), timed(torch_peer)
    # Check the write while we are here: bytes where ours and the torch path differ.
    kc.zero_(); vc.zero_()
    ours()
    mine = (kc.view(torch.uint8).clone(), vc.view(torch.uint8).clone())
    kc.zero_(); vc.zero_()
    torch_peer()
    diff = sum(int((a != b.view(torch.uint8)).sum()) for a, b in zip(mine, (kc, vc)))
    gb = lambda t: moved / t / 1e9
    return (f"{tokens}x{heads}x{dim} {str(dtype)[6:]}->{'e4m3' if fp8 else str(dtype)[6:]}",
            moved, t_ours, t_peer, t_copy, gb(t_ours), gb(t_copy), diff)


rows = []
for fp8 in (False, True):
    for tokens, heads, dim in ((8, 8, 128), (64, 8, 128), (4096, 8, 128), (16384, 8, 128),
                               (4096, 32, 128), (4096, 8, 64), (4096, 8, 256)):
        rows.append(case(tokens, heads, dim, torch.bfloat16, fp8))
print(f"{torch.cuda.get_device_name()}")
print("| write | MB moved | ours us | torch index_put us | copy us | ours GB/s | copy GB/s | ours/copy | bytes differing from torch |")
print("|---|---|---|---|---|---|---|---|---|")
for name, moved, to, tp, tc, go, gc, diff in rows:
    print(f"| {name} | {moved / 1e6:.2f} | {to * 1e6:.1f} | {tp * 1e6:.1f} | {tc * 1e6:.1f} | "
          f"{go:.0f} | {gc:.0f} | {go / gc:.2f} | {diff} |")
