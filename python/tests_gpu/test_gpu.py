"""GPU tests of the fp8_sdpa package (need torch with CUDA and a GPU; python/test.sh does not
run them). FlashAttention's criterion: the error of the output against a float32 reference
is at most twice (plus a small absolute term) the error of PyTorch's own attention in the
input dtype against that reference.

Run on a GPU machine (see python/README.md):
    python -m pytest -q python/tests_gpu
They fail, never skip, without a GPU.
"""

import math

import pytest
import torch

import fp8_sdpa

DEV = "cuda"


def ref_attn(q, k, v, causal, upcast=True, scale=None):
    """(batch, seqlen, heads, dim) attention in float32 (upcast) or the input dtype, with
    GQA and a bottom-right causal mask, like FlashAttention's attention_ref."""
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    hq, hk = q.shape[2], k.shape[2]
    k = k.repeat_interleave(hq // hk, dim=2)
    v = v.repeat_interleave(hq // hk, dim=2)
    scale = scale or 1.0 / math.sqrt(q.shape[-1])
    s = torch.einsum("bthd,bshd->bhts", q * scale, k)
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        row = torch.arange(sq, device=q.device)[:, None]
        col = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(col > row + sk - sq, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhts,bshd->bthd", p.to(v.dtype), v)


def check(out, q, k, v, causal, factor=2.0):
    ref = ref_attn(q, k, v, causal)
    pt = ref_attn(q, k, v, causal, upcast=False)
    err = (out.float() - ref).abs().max().item()
    pt_err = (pt.float() - ref).abs().max().item()
    assert err <= factor * pt_err + 1e-5, (err, pt_err)


def test_gpu_present():
    assert torch.cuda.is_available() and fp8_sdpa.device_count() > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mha", ["mha", "gqa", "mqa"])
@pytest.mark.parametrize("sq,sk", [(1, 239), (113, 203), (128, 128), (512, 256), (1024, 1024)])
def test_flash_attn_output(dtype, d, causal, mha, sq, sk):
    torch.manual_seed(0)
    b, hq = 2, 8
    hk = {"mha": 8, "gqa": 2, "mqa": 1}[mha]
    q = torch.randn(b, sq, hq, d, device=DEV, dtype=dtype)
    k = torch.randn(b, sk, hk, d, device=DEV, dtype=dtype)
    v = torch.randn(b, sk, hk, d, device=DEV, dtype=dtype)
    out, lse = fp8_sdpa.flash_attn_func(q, k, v, causal=causal, return_softmax_lse=True)
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (b, hq, sq)
    check(out, q, k, v, causal)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_varlen_output(dtype, causal):
    torch.manual_seed(0)
    hq, hk, d = 8, 2, 128
    lens_q, lens_k = [5, 1, 77, 128], [5, 300, 90, 128]
    q = torch.randn(sum(lens_q), hq, d, device=DEV, dtype=dtype)
    k = torch.randn(sum(lens_k), hk, d, device=DEV, dtype=dtype)
    v = torch.randn(sum(lens_k), hk, d, device=DEV, dtype=dtype)
    cu = lambda ls: torch.tensor([0] + list(torch.tensor(ls).cumsum(0)), dtype=torch.int32,  # noqa: E731
                                 device=DEV)
    out = fp8_sdpa.flash_attn_varlen_func(q, k, v, cu(lens_q), cu(lens_k), max(lens_q),
                                          max(lens_k), causal=causal)
    oq = ok = 0
    for nq, nk in zip(lens_q, lens_k):
        sl = lambda t, a, n: t[a:a + n][None]  # noqa: E731
        check(sl(out, oq, nq), sl(q, oq, nq), sl(k, ok, nk), sl(v, ok, nk), causal)
        oq, ok = oq + nq, ok + nk


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_with_kvcache(paged, causal):
    torch.manual_seed(0)
    b, sq, hq, hk, d, cap, page = 3, 2, 16, 4, 128, 512, 64
    q = torch.randn(b, sq, hq, d, device=DEV, dtype=torch.bfloat16)
    k = torch.randn(b, cap, hk, d, device=DEV, dtype=torch.bfloat16)
    v = torch.randn(b, cap, hk, d, device=DEV, dtype=torch.bfloat16)
    lens = torch.tensor([7, 512, 300], dtype=torch.int32, device=DEV)
    if paged:
        perm = torch.randperm(b * cap // page, device=DEV)
        kp = torch.empty(b * cap // page, page, hk, d, device=DEV, dtype=k.dtype)
        vp = torch.empty_like(kp)
        kp[perm] = k.reshape(-1, page, hk, d)
        vp[perm] = v.reshape(-1, page, hk, d)
        table = perm.view(b, cap // page).to(torch.int32)
        out = fp8_sdpa.flash_attn_with_kvcache(q, kp, vp, cache_seqlens=lens, block_table=table,
                                               causal=causal)
    else:
        out = fp8_sdpa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, causal=causal)
    for i, n in enumerate(lens.tolist()):
        check(out[i:i + 1], q[i:i + 1], k[i:i + 1, :n], v[i:i + 1, :n], causal)


def test_quantize_round_trip_and_fp8_kv():
    torch.manual_seed(0)
    b, s, hq, hk, d = 2, 256, 8, 2, 128
    q = torch.randn(b, s, hq, d, device=DEV, dtype=torch.bfloat16)
    k = torch.randn(b, s, hk, d, device=DEV, dtype=torch.bfloat16)
    v = torch.randn(b, s, hk, d, device=DEV, dtype=torch.bfloat16)
    kc, kd = fp8_sdpa.quantize_e4m3(k)
    vc, vd = fp8_sdpa.quantize_e4m3(v)
    assert kc.dtype == torch.float8_e4m3fn and kd.shape == (b, hk)
    kdq = kc.float() * kd[:, None, :, None]
    assert (kdq - k.float()).abs().max() <= k.float().abs().max() / 8
    out = fp8_sdpa.flash_attn_func(q, kc, vc, causal=True, k_descale=kd, v_descale=vd)
    vdq = vc.float() * vd[:, None, :, None]
    # Against the dequantized K/V: the quantization error is the input's, not ours.
    check(out, q, kdq.to(q.dtype), vdq.to(q.dtype), True, factor=3.0)


@pytest.mark.parametrize("kind", ["auto", "fp8"])
@pytest.mark.parametrize("d", [128, 36])
def test_reshape_and_cache_flash_matches_torch_rows(kind, d):
    torch.manual_seed(0)
    t, h, pages, page = 37, 4, 12, 16
    k = torch.randn(t, h, d, device=DEV, dtype=torch.bfloat16)
    v = torch.randn(t, h, d, device=DEV, dtype=torch.bfloat16)
    cdt = torch.float8_e4m3fn if kind == "fp8" else torch.bfloat16
    kc = torch.zeros(pages, page, h, d, device=DEV, dtype=cdt)
    vc = torch.zeros_like(kc)
    slots = torch.randperm(pages * page, device=DEV)[:t]
    slots[3] = -1  # padding: skipped
    scale = torch.tensor([0.01, 0.02, 0.005, 0.1], device=DEV)
    fp8_sdpa.reshape_and_cache_flash(k, v, kc, vc, slots, kind, scale, scale)
    keep = slots >= 0
    want_k = kc.new_zeros(pages * page, h, d)
    want_v = vc.new_zeros(pages * page, h, d)
    kk, vv = k[keep].float(), v[keep].float()
    if kind == "fp8":  # x / scale, rounded once, saturating at 448
        kk = (kk / scale[:, None]).clamp(-448, 448)
        vv = (vv / scale[:, None]).clamp(-448, 448)
    want_k[slots[keep]] = kk.to(cdt)
    want_v[slots[keep]] = vv.to(cdt)
    assert torch.equal(kc.view(-1, h, d).view(torch.uint8), want_k.view(torch.uint8))
    assert torch.equal(vc.view(-1, h, d).view(torch.uint8), want_v.view(torch.uint8))


def test_torch_compile_and_cuda_graph():
    torch.manual_seed(0)
    q = torch.randn(2, 128, 8, 128, device=DEV, dtype=torch.float16)
    k = torch.randn(2, 128, 2, 128, device=DEV, dtype=torch.float16)
    v = torch.randn(2, 128, 2, 128, device=DEV, dtype=torch.float16)
    eager = fp8_sdpa.flash_attn_func(q, k, v, causal=True)
    f = torch.compile(lambda q, k, v: fp8_sdpa.flash_attn_func(q, k, v, causal=True) * 2,
                      fullgraph=True)
    torch.testing.assert_close(f(q, k, v), eager * 2)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fp8_sdpa.flash_attn_func(q, k, v, causal=True)  # warm-up: compiles, loads
        with torch.cuda.graph(g, stream=s):
            out = fp8_sdpa.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(s)
    q.copy_(torch.randn_like(q))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, fp8_sdpa.flash_attn_func(q, k, v, causal=True))


def test_errors_raise_python_exceptions():
    q = torch.randn(1, 16, 2, 96, device=DEV, dtype=torch.float16)
    with pytest.raises(ValueError, match="head dim 96 is not supported"):
        fp8_sdpa.flash_attn_func(q, q, q)
