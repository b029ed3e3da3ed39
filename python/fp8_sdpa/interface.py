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
    picks its own split).

    With ``k``, ``v`` ``(batch, seqlen_new, nheads_k, headdim)`` (q's dtype), the new tokens
    are first written into the cache in place at positions ``cache_seqlens[b] ..
    cache_seqlens[b] + seqlen_new`` (through ``block_table`` for a paged cache; E4M3 caches
    quantize them with per-head ``k_descale``/``v_descale`` ``(nheads_k,)``, saturating), then
    attended with ``cache_seqlens + seqlen_new`` keys, as FlashAttention does;
    ``cache_seqlens`` itself is not changed. Positions past the cache are not written (and
    the call is refused while value checks are on)."""
    _unsupported(
        rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
    )
    if (k is None) != (v is None):
        raise ValueError("give both k and v to append, or neither")
    if k is not None:
        # The call is checked before the cache is written; for a dense cache the plan names
        # the page size the library reads it in, which the write uses too.
        plan = _native.plan_kvcache(
            q, k_cache, v_cache, None, block_table, q_descale, k_descale, v_descale,
            softmax_scale, causal, bool(return_softmax_lse),
        )
        cache_seqlens = _append_kv(
            q, k_cache, v_cache, k, v, cache_seqlens, block_table, k_descale, v_descale,
            plan["page_size"],
        )
    out, lse = _ops(q).flash_attn_kvcache(
        q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal,
        q_descale, k_descale, v_descale, bool(return_softmax_lse),
    )
    return (out, lse) if return_softmax_lse else out


def _per_head(torch, scale, heads, device, name):
    """A descale as float32 ``(heads,)`` on ``device``: one value (vLLM's per-tensor scale)
    is repeated over the heads."""
    t = torch.as_tensor(scale, dtype=torch.float32, device=device).reshape(-1)
    if t.numel() == 1:
        return t.expand(heads).contiguous()
    if t.numel() != heads:
        raise ValueError(
            f"{name} has {t.numel()} values; give one, or one per kv head ({heads})"
        )
    return t.contiguous()


def reshape_and_cache_flash(
    key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype="auto",
    k_scale=None, v_scale=None,
):
    """vLLM's ``reshape_and_cache_flash``: writes ``key``, ``value`` ``(num_tokens, num_heads,
    head_size)`` (fp16/bf16) into the paged caches ``(num_blocks, block_size, num_heads,
    head_size)`` (contiguous, block_size 16..256) in place, token ``t`` at slot
    ``slot_mapping[t]`` = block * block_size + offset (int64 or int32; negative: padding,
    skipped). ``kv_cache_dtype`` ``"auto"``: caches of key's dtype (the scales are ignored);
    ``"fp8"`` or ``"fp8_e4m3"``: float8_e4m3fn caches, code = e4m3(x / scale) saturating at
    ±448, ``k_scale``/``v_scale`` one float32 value or one per head. A slot past the caches is
    refused while value checks are on, and never written either way."""
    torch = _torch()
    if kv_cache_dtype not in ("auto", "fp8", "fp8_e4m3"):
        raise NotImplementedError(
            f"kv_cache_dtype {kv_cache_dtype!r}: fp8-sdpa writes 'auto' (16-bit) and "
            "'fp8'/'fp8_e4m3' caches"
        )
    if slot_mapping.dtype != torch.int32:
        slot_mapping = slot_mapping.to(torch.int32)
    kd = vd = None
    if kv_cache_dtype != "auto":
        if k_scale is None or v_scale is None:
            raise ValueError("an fp8 cache needs k_scale and v_scale (its descales)")
        heads = key.shape[-2]
        kd = _per_head(torch, k_scale, heads, key.device, "k_scale")
        vd = _per_head(torch, v_scale, heads, key.device, "v_scale")
    dev, stream, check = _launch_ctx(torch, key)
    _native.run_write_kv(
        key, value, key_cache, value_cache, slot_mapping.contiguous(), kd, vd, dev, stream, check,
    )


def _append_kv(q, k_cache, v_cache, k, v, cache_seqlens, block_table, k_descale, v_descale,
               page_size):
    """flash_attn_with_kvcache's append: writes k, v at each sequence's end (in place) and
    returns the lengths to attend with. ``page_size``: a dense cache's pages (the plan's)."""
    torch = _torch()
    b, s_new = k.shape[0], k.shape[1]
    if cache_seqlens is None:
        raise ValueError("appending k, v needs cache_seqlens (where each sequence ends)")
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((b,), cache_seqlens, dtype=torch.int32, device=q.device)
    pos = cache_seqlens.to(torch.int64)[:, None] + torch.arange(s_new, device=q.device)[None, :]
    if block_table is None:
        # A dense cache (batch, seqlen_cache, ...) is pools of pages that tile each row; view()
        # refuses a cache it cannot view without a copy (a write to a copy would be lost).
        cap, p = k_cache.shape[1], page_size
        slots = torch.arange(b, device=q.device)[:, None] * cap + pos
        try:
            pools = tuple(c.view(c.shape[0] * cap // p, p, *c.shape[2:]) for c in (k_cache, v_cache))
        except RuntimeError as e:
            raise ValueError(f"appending needs contiguous caches: {e}") from e
    else:
        page = k_cache.shape[1]
        cap = block_table.shape[1] * page
        idx = (pos // page).clamp(max=block_table.shape[1] - 1)
        slots = block_table.to(torch.int64).gather(1, idx) * page + pos % page
        pools = (k_cache, v_cache)
    if _CHECK_VALUES and not torch.cuda.is_current_stream_capturing():
        longest = int(cache_seqlens.max()) + s_new
        if longest > cap:
            raise ValueError(
                f"appending {s_new} tokens makes a sequence of {longest} but the cache holds {cap}"
            )
    slots = torch.where(pos < cap, slots, torch.full_like(slots, -1))
    fp8 = k_cache.dtype == torch.float8_e4m3fn
    if fp8 and (k_descale is None or v_descale is None or k_descale.dim() != 1):
        raise NotImplementedError(
            "appending to an E4M3 cache needs per-head k_descale and v_descale (nheads_k,)"
        )
    reshape_and_cache_flash(
        k.reshape(b * s_new, *k.shape[2:]), v.reshape(b * s_new, *v.shape[2:]),
        pools[0], pools[1], slots.reshape(-1),
        "fp8" if fp8 else "auto", k_descale if fp8 else None, v_descale if fp8 else None,
    )
    return (cache_seqlens + s_new).to(torch.int32)


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
