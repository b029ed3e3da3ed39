"""Packing a padded batch into varlen form and back, as FlashAttention's tests expect."""

import torch
import torch.nn.functional as F


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """(batch, seqlen, ...) and a bool mask (batch, seqlen) -> (the kept tokens (total, ...),
    their flat indices, int32 cu_seqlens (batch + 1), the longest kept length, int32 lengths).
    ``unused_mask`` marks tokens that are kept in the packing but not counted as used."""
    used = attention_mask if unused_mask is None else attention_mask | unused_mask
    seqlens = used.sum(dim=-1, dtype=torch.int32)
    used_seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(used.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item())
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, cu_seqlens, max_seqlen, used_seqlens


def pad_input(hidden_states, indices, batch, seqlen):
    """The inverse of ``unpad_input``: (total, ...) back to (batch, seqlen, ...), zeros elsewhere."""
    out = torch.zeros(batch * seqlen, *hidden_states.shape[1:], device=hidden_states.device,
                      dtype=hidden_states.dtype)
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
