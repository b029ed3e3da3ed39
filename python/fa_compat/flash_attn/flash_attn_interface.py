"""The two internals FlashAttention's tests import from here."""

from . import *  # noqa: F401,F403

# Not ROCm: the tests' CUDA-only checks apply.
USE_TRITON_ROCM = False


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    # Only the dropout tests read it (to decode FA2's dropout mask); fp8_sdpa has no dropout.
    raise NotImplementedError("fp8_sdpa has no dropout, so no dropout mask to decode")
