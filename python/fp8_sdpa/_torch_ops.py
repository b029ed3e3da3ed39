"""torch.library custom ops over the eager calls, with fake (meta) implementations, so that
torch.compile traces through them and CUDA graphs capture them. Registered lazily, on the
first call with torch tensors, and only where torch has ``torch.library.custom_op``
(torch 2.4 and newer); otherwise the calls run eagerly.

(No ``from __future__ import annotations`` here: torch infers each op's schema from its
annotations.)
"""

import sys
from typing import Optional, Tuple

_OPS = None
_FAILED = False
_COMPILING = None  # torch.compiler.is_compiling, looked up once at registration


def _out_dtype(torch, q, k):
    # Full FP8 writes bf16; every other path writes q's dtype (the library's Precision::out).
    return torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype


def _register(torch):
    from torch import Tensor

    from . import interface as f

    def lse_or_empty(q, lse):
        return lse if lse is not None else q.new_empty((0,), dtype=torch.float32)

    @torch.library.custom_op("fp8_sdpa::flash_attn", mutates_args=())
    def flash_attn(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        softmax_scale: Optional[float],
        causal: bool,
        q_descale: Optional[Tensor],
        k_descale: Optional[Tensor],
        v_descale: Optional[Tensor],
        want_lse: bool,
    ) -> Tuple[Tensor, Tensor]:
        out, lse = f._flash_attn(
            q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, want_lse
        )
        return out, lse_or_empty(q, lse)

    @flash_attn.register_fake
    def _(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, want_lse):
        b, s, h, _ = q.shape
        out = q.new_empty(q.shape, dtype=_out_dtype(torch, q, k))
        lse = q.new_empty((b, h, s) if want_lse else (0,), dtype=torch.float32)
        return out, lse

    @torch.library.custom_op("fp8_sdpa::flash_attn_varlen", mutates_args=())
    def flash_attn_varlen(
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cu_seqlens_q: Tensor,
        cu_seqlens_k: Tensor,
        max_seqlen_q: int,
        max_seqlen_k: int,
        softmax_scale: Optional[float],
        causal: bool,
        q_descale: Optional[Tensor],
        k_descale: Optional[Tensor],
        v_descale: Optional[Tensor],
        want_lse: bool,
    ) -> Tuple[Tensor, Tensor]:
        out, lse = f._flash_attn_varlen(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            softmax_scale, causal, q_descale, k_descale, v_descale, want_lse,
        )
        return out, lse_or_empty(q, lse)

    @flash_attn_varlen.register_fake
    def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
          softmax_scale, causal, q_descale, k_descale, v_descale, want_lse):
        t, h, _ = q.shape
        out = q.new_empty(q.shape, dtype=_out_dtype(torch, q, k))
        lse = q.new_empty((h, t) if want_lse else (0,), dtype=torch.float32)
        return out, lse

    @torch.library.custom_op("fp8_sdpa::flash_attn_kvcache", mutates_args=())
    def flash_attn_kvcache(
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        cache_seqlens: Optional[Tensor],
        block_table: Optional[Tensor],
        softmax_scale: Optional[float],
        causal: bool,
        q_descale: Optional[Tensor],
        k_descale: Optional[Tensor],
        v_descale: Optional[Tensor],
        want_lse: bool,
    ) -> Tuple[Tensor, Tensor]:
        out, lse = f._flash_attn_kvcache(
            q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal,
            q_descale, k_descale, v_descale, want_lse,
        )
        return out, lse_or_empty(q, lse)

    @flash_attn_kvcache.register_fake
    def _(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal,
          q_descale, k_descale, v_descale, want_lse):
        b, s, h, _ = q.shape
        out = q.new_empty(q.shape, dtype=_out_dtype(torch, q, k_cache))
        lse = q.new_empty((b, h, s) if want_lse else (0,), dtype=torch.float32)
        return out, lse

    @torch.library.custom_op("fp8_sdpa::quantize_e4m3", mutates_args=())
    def quantize_e4m3(x: Tensor) -> Tuple[Tensor, Tensor]:
        return f._quantize_e4m3(x)

    @quantize_e4m3.register_fake
    def _(x):
        b, _, h, _ = x.shape
        return (
            x.new_empty(x.shape, dtype=torch.float8_e4m3fn),
            x.new_empty((b, h), dtype=torch.float32),
        )

    class Ops:
        """The calls through the custom ops; an absent LSE comes back as None."""

        @staticmethod
        def flash_attn(q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, want_lse):
            out, lse = torch.ops.fp8_sdpa.flash_attn(
                q, k, v, softmax_scale, causal, q_descale, k_descale, v_descale, want_lse
            )
            return out, (lse if want_lse else None)

        @staticmethod
        def flash_attn_varlen(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, causal,
                              q_descale, k_descale, v_descale, want_lse):
            out, lse = torch.ops.fp8_sdpa.flash_attn_varlen(
                q, k, v, cu_q, cu_k, int(max_q), int(max_k), softmax_scale, causal,
                q_descale, k_descale, v_descale, want_lse,
            )
            return out, (lse if want_lse else None)

        @staticmethod
        def flash_attn_kvcache(q, k_cache, v_cache, cache_seqlens, block_table,
                               softmax_scale, causal, q_descale, k_descale, v_descale,
                               want_lse):
            if isinstance(cache_seqlens, int):
                cache_seqlens = torch.full(
                    (q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device
                )
            out, lse = torch.ops.fp8_sdpa.flash_attn_kvcache(
                q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, causal,
                q_descale, k_descale, v_descale, want_lse,
            )
            return out, (lse if want_lse else None)

        @staticmethod
        def quantize_e4m3(x):
            return torch.ops.fp8_sdpa.quantize_e4m3(x)

    return Ops


def register(torch):
    """Registers the custom ops once (a no-op after the first call, or where torch is too old
    for torch.library.custom_op). Done eagerly, at import when torch is loaded or on the first
    call: registering inside a torch.compile trace is a graph break dynamo refuses."""
    global _OPS, _FAILED, _COMPILING
    if _OPS is None and not _FAILED:
        if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
            _OPS = _register(torch)
            _COMPILING = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        else:
            _FAILED = True


def ops(first=None):
    """The custom ops, or None (the calls then run eagerly): None for a plain tensor outside
    torch.compile too, where the op's dispatch only costs host time (about 50 us a call on an
    H200 host: most of an eager call's), and for torch not imported or too old, or ``first``
    not a torch tensor. Tracing (torch.compile, fake or functional tensors) goes through the
    ops and their fake implementations."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(first, torch.Tensor):
        return None
    register(torch)
    if _OPS is None or (type(first) is torch.Tensor and not _COMPILING()):
        return None
    return _OPS
