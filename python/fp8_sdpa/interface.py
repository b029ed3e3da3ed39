"""FlashAttention's forward API over fp8-sdpa's kernels.

Every function validates its call in the Rust library first (``_native.plan_*``: no GPU, no
torch), then allocates the outputs with torch and launches on torch's current stream
(``_native.run_*``). Tensors are passed by data pointer, so the extension links to no torch.

Layouts are FlashAttention's: ``(batch, seqlen, nheads, headdim)``; varlen tensors
``(total_tokens, nheads, headdim)`` with int32 ``cu_seqlens``; a paged cache
``(num_blocks, page_block_size, nheads_k, headdim)`` with an int32 ``block_table``.
Bad input raises ``ValueError`` with the library's message, anything else ``RuntimeError``;
FlashAttention options this library does not implement raise ``NotImplementedError``.
"""

from __future__ import annotations

from . import _native

# Read descales, offsets and tables back and check them (a stream synchronization) on every
# call outside CUDA graph capture. set_value_checks(False) trusts them: bad values then give
# wrong numbers but never an access outside the tensors (the library clamps).
_CHECK_VALUES = True


def set_value_checks(on: bool) -> None:
    """Turns the read-back checks of descales, offsets and block tables on or off."""
    global _CHECK_VALUES
    _CHECK_VALUES = bool(on)


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the message is the point
        raise RuntimeError(
            "fp8_sdpa allocates its outputs with PyTorch: install torch (any version with "
            "CUDA) next to fp8-sdpa"
        ) from e
    return torch


def _unsupported(**given) -> None:
    """Refuses FlashAttention options the library does not implement (any non-default)."""
    defaults = {
        "dropout_p": 0.0,
        "window_size": (-1, -1),
        "softcap": 0.0,
        "alibi_slopes": None,
        "qv": None,
        "seqused_q": None,
        "seqused_k": None,
        "k": None,
        "v": None,
        "rotary_cos": None,
        "rotary_sin": None,
        "cache_batch_idx": None,
        "cache_leftpad": None,
        "block_table": None,
    }
    for name, value in given.items():
        default = defaults[name]
        if name == "window_size" and value is not None and tuple(value) == default:
            continue
        if value is default or (default is not None and value == default):
            continue
        raise NotImplementedError(
            f"fp8-sdpa does not implement {name}={value!r} (forward attention only: no "
            "dropout, sliding window, softcap, ALiBi, rotary, appended K/V or cache_batch_idx)"
        )


def _launch_ctx(torch, t):
    """(device index, CUstream handle, whether to check values) for a call on t's device."""
    index = t.device.index
    if index is None:
        index = torch.cuda.current_device()
    stream = torch.cuda.current_stream(index).cuda_stream
    check = _CHECK_VALUES and not torch.cuda.is_current_stream_capturing()
    return index, stream, check


def _expand_q_descale(q, k, q_descale):
    """FlashAttention 3 gives Q's descale per kv head, (batch, nheads_k); the library reads
    one per query head: repeat each over its group."""
    if q_descale is None or len(q_descale.shape) == 0:
        return q_descale
    hq, hk = q.shape[-2], k.shape[-2]
    if hq != hk and q_descale.shape[-1] == hk:
        return q_descale.repeat_interleave(hq // hk, dim=-1).contiguous()
    return q_descale


def _dtype(torch, name):
    return getattr(torch, name)


def _returns(out, lse, return_softmax_lse, return_attn_probs):
    if return_attn_probs:
        # FlashAttention 2's (out, softmax_lse, S_dmask); no dropout, so no mask.
        return out, lse, None
    return (out, lse) if return_softmax_lse else out


def _flash_attn(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, want_lse):
    """The dense call: (out, lse or None)."""
    q_descale = _expand_q_descale(q, k, q_descale)
    plan = _native.plan_dense(
        q, k, v, q_descale, k_descale, v_descale, softmax_scale, causal, want_lse
    )
    torch = _torch()
    b, s, h = plan["batch"], plan["seqlen_q"], plan["nheads"]
    out = torch.empty(tuple(q.shape), dtype=_dtype(torch, plan["out_dtype"]), device=q.device)
    lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device) if want_lse else None
    dev, stream, check = _launch_ctx(torch, q)
    _native.run_dense(
        q, k, v, out, lse, q_descale, k_descale, v_descale,
        softmax_scale, causal, dev, stream, check,
    )
    return out, lse


def flash_attn_func(
    q,
    k,
    v,
    softmax_scale=None,
    causal=False,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    return_softmax_lse=False,
    *,
    dropout_p=0.0,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    qv=None,
):
    """Attention of q ``(batch, seqlen_q, nheads, headdim)`` over k, v
    ``(batch, seqlen_k, nheads_k, headdim)`` (MHA, GQA, MQA; causal aligned bottom-right).

    dtypes: fp16 or bf16 throughout; fp16/bf16 q with float8_e4m3fn k, v (descales needed for
    k, v); or float8_e4m3fn q, k, v (descales for all three; the output is bf16). Descales
    are float32 ``(nheads,)`` or ``(batch, nheads)`` (FlashAttention 3's ``(batch,
    nheads_k)`` for q is repeated over each group). headdim 64, 128 or 256.

    Returns ``out`` (q's shape), or ``(out, softmax_lse)`` with ``return_softmax_lse``
    (``softmax_lse`` float32 ``(batch, nheads, seqlen_q)``, natural log), or FlashAttention
    2's ``(out, softmax_lse, None)`` with ``return_attn_probs``. ``deterministic`` is accepted
    and ignored (the forward pass is deterministic).
    """
    _unsupported(
        dropout_p=dropout_p, window_size=window_size, softcap=softcap,
        alibi_slopes=alibi_slopes, qv=qv,
    )
    want_lse = bool(return_softmax_lse or return_attn_probs)
    out, lse = _ops(q).flash_attn(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, want_lse)
    return _returns(out, lse, return_softmax_lse, return_attn_probs)


def _flash_attn_varlen(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
    softmax_scale, causal, q_descale, k_descale, v_descale, want_lse,
):
    q_descale = _expand_q_descale(q, k, q_descale)
    plan = _native.plan_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
        q_descale, k_descale, v_descale, softmax_scale, causal, want_lse,
    )
    torch = _torch()
    total, h = q.shape[0], plan["nheads"]
    out = torch.empty(tuple(q.shape), dtype=_dtype(torch, plan["out_dtype"]), device=q.device)
    lse = torch.empty((h, total), dtype=torch.float32, device=q.device) if want_lse else None
    dev, stream, check = _launch_ctx(torch, q)
    _native.run_varlen(
        q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
        q_descale, k_descale, v_descale, softmax_scale, causal, dev, stream, check,
    )
    return out, lse


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    softmax_scale=None,
    causal=False,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    return_softmax_lse=False,
    *,
    dropout_p=0.0,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    seqused_q=None,
    seqused_k=None,
    qv=None,
):
    """Attention over a variable-length batch packed without padding: q
    ``(total_q, nheads, headdim)``, k, v ``(total_k, nheads_k, headdim)``, sequence b being
    tokens ``cu_seqlens[b]:cu_seqlens[b+1]`` (int32, ``batch + 1`` entries). Causal aligns
    each sequence bottom-right. Returns ``out`` (q's shape) or ``(out, softmax_lse)`` with
    ``softmax_lse`` float32 ``(nheads, total_q)``; a query that sees no key gets 0 and -inf.
    """
    _unsupported(
        dropout_p=dropout_p, window_size=window_size, softcap=softcap,
        alibi_slopes=alibi_slopes, block_table=block_table, seqused_q=seqused_q,
        seqused_k=seqused_k, qv=qv,
    )
    want_lse = bool(return_softmax_lse or return_attn_probs)
    out, lse = _ops(q).flash_attn_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        softmax_scale, causal, q_descale, k_descale, v_descale, want_lse,
    )
    return _returns(out, lse, return_softmax_lse, return_attn_probs)


# Block tables of dense caches, by (device, batch, batch_pages, pages_per_seq): one per shape
# serves every call (and stays valid under CUDA graph replay).
_DENSE_TABLES: dict = {}


def _dense_table(torch, device, batch, batch_pages, pages_per_seq):
    key = (str(device), batch, batch_pages, pages_per_seq)
    t = _DENSE_TABLES.get(key)
    if t is None:
        rows = torch.arange(batch, dtype=torch.int32, device=device) * batch_pages
        cols = torch.arange(pages_per_seq, dtype=torch.int32, device=device)
        t = (rows[:, None] + cols[None, :]).contiguous()
        if len(_DENSE_TABLES) > 64:
            _DENSE_TABLES.clear()
        _DENSE_TABLES[key] = t
    return t


def _flash_attn_kvcache(
    q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal,
    q_descale, k_descale, v_descale, want_lse,
):
    torch = _torch() if isinstance(cache_seqlens, int) else None
    lens_arg = None if isinstance(cache_seqlens, int) else cache_seqlens
    plan = _native.plan_kvcache(
        q, k_cache, v_cache, lens_arg, block_table, q_descale, k_descale, v_descale,
        softmax_scale, causal, want_lse,
    )
    torch = torch or _torch()
    b, s, h = plan["batch"], plan["seqlen_q"], plan["nheads"]
    page_size = None
    if block_table is None:
        page_size = plan["page_size"]
        block_table = _dense_table(
            torch, q.device, b, plan["batch_pages"], plan["pages_per_seq"]
        )
    if cache_seqlens is None:
        cache_seqlens = plan["max_pages"] * plan["page_size"]
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((b,), cache_seqlens, dtype=torch.int32, device=q.device)
    out = torch.empty(tuple(q.shape), dtype=_dtype(torch, plan["out_dtype"]), device=q.device)
    lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device) if want_lse else None
    dev, stream, check = _launch_ctx(torch, q)
    _native.run_kvcache(
        q, k_cache, v_cache, out, lse, cache_seqlens, block_table, page_size,
        q_descale, k_descale, v_descale, softmax_scale, causal, dev, stream, check,
    )
    return out, lse


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
    *,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """Decoding attention of q ``(batch, seqlen_q, nheads, headdim)`` (fp16/bf16) over a KV
    cache, FlashAttention's argument order. The cache is dense ``(batch, seqlen_cache,
    nheads_k, headdim)`` (seqlen_cache a multiple of 16, or any length with a divisor in
    16..256), or paged ``(num_blocks,
    page_block_size, nheads_k, headdim)`` (page_block_size 16..256) with an int32
    ``block_table`` ``(batch, max_num_blocks_per_seq)``; fp16/bf16 like q, or
    float8_e4m3fn with ``k_descale``/``v_descale``. ``cache_seqlens``: int32 ``(batch,)`` or
    an int (default: the whole cache). Causal aligns each sequence bottom-right. Returns
    ``out`` or ``(out, softmax_lse)``. ``num_splits`` is accepted and ignored (the library
    picks its own split)."""
    _unsupported(
        k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
    )
    out, lse = _ops(q).flash_attn_kvcache(
        q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal,
        q_descale, k_descale, v_descale, bool(return_softmax_lse),
    )
    return (out, lse) if return_softmax_lse else out


def _quantize_e4m3(x):
    plan = _native.plan_quantize(x)
    torch = _torch()
    b, h = plan["batch"], plan["nheads"]
    codes = torch.empty(tuple(x.shape), dtype=torch.float8_e4m3fn, device=x.device)
    descale = torch.empty((b, h), dtype=torch.float32, device=x.device)
    scratch = torch.zeros((b, h), dtype=torch.int32, device=x.device)
    dev, stream, _ = _launch_ctx(torch, x)
    _native.run_quantize(x, codes, descale, scratch, dev, stream)
    return codes, descale


def quantize_e4m3(x):
    """Quantizes fp16/bf16 ``x`` ``(batch, seqlen, nheads, headdim)`` (last dim contiguous)
    to float8_e4m3fn codes (contiguous, x's shape) and float32 descales ``(batch, nheads)``
    (descale = amax / 448 per (batch, head), 1 for an all-zero head): ``x ~= codes *
    descale``. The pair is what ``flash_attn_func`` takes as k (or q, v) and its descale."""
    return _ops(x).quantize_e4m3(x)


class _Eager:
    """The calls without torch.library (torch too old for custom ops, or fakes in tests)."""

    flash_attn = staticmethod(_flash_attn)
    flash_attn_varlen = staticmethod(_flash_attn_varlen)
    flash_attn_kvcache = staticmethod(_flash_attn_kvcache)
    quantize_e4m3 = staticmethod(_quantize_e4m3)


def _ops(first):
    """The calls: through the torch.library custom ops when ``first`` is a torch tensor and
    they register (so torch.compile traces them), else eagerly."""
    from . import _torch_ops

    return _torch_ops.ops(first) or _Eager
