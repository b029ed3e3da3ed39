"""fp8-sdpa: fused attention (forward) for NVIDIA GPUs with FlashAttention's API.

fp16/bf16, FP8 (E4M3) K/V and full FP8; head dims 64, 128, 256; kernels compiled at run time
with NVRTC (found in the ``nvidia-cuda-nvrtc`` wheel PyTorch installs, or through
``$SDPA_NVRTC_PATH``). The extension does not link to torch: tensors are passed by data
pointer and launched on torch's current stream, so one wheel serves every torch version.
"""

from . import _nvrtc

# Before the extension can open a device (the library reads the variable then).
NVRTC_PATH = _nvrtc.configure()

from ._native import __version__, device_count  # noqa: E402
from .interface import (  # noqa: E402
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
    quantize_e4m3,
    reshape_and_cache_flash,
    set_value_checks,
)

__all__ = [
    "__version__",
    "device_count",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "quantize_e4m3",
    "reshape_and_cache_flash",
    "set_value_checks",
    "NVRTC_PATH",
]

# With torch already imported, the torch.library ops are registered now: a first call made
# inside torch.compile could not register them (eager calls bypass them, see _torch_ops.ops).
import sys as _sys  # noqa: E402

if "torch" in _sys.modules:
    from . import _torch_ops as _t

    _t.register(_sys.modules["torch"])
