"""FlashAttention's tests import ``apply_rotary_emb``; only the cases that append K/V with
rotary embeddings call it, and the runner deselects those (fp8_sdpa appends no K/V)."""


def apply_rotary_emb(*args, **kwargs):
    raise NotImplementedError("fp8_sdpa applies no rotary embedding (and appends no K/V)")
