"""Finding NVRTC for the library: the ``nvidia-cuda-nvrtc`` wheel PyTorch installs.

The Rust library looks in ``$SDPA_NVRTC_PATH``, the loader path and the CUDA toolkit's
folders, never in site-packages (it runs no program to find them); the Python layer knows
where pip put NVRTC, so it points the library there, unless the user already chose.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ENV = "SDPA_NVRTC_PATH"

# Wheel folders under the ``nvidia`` namespace package: CUDA 13's, then CUDA 12's.
_CANDIDATES = (
    ("cu13/lib", "libnvrtc.so.13"),
    ("cuda_nvrtc/lib", "libnvrtc.so.13"),
    ("cuda_nvrtc/lib", "libnvrtc.so.12"),
)


def _torch_cuda_major() -> int | None:
    # Only a torch already imported is asked: importing fp8_sdpa never imports torch.
    torch = sys.modules.get("torch")
    version = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def find_nvrtc() -> Path | None:
    """The folder holding a pip-installed libnvrtc, or None. With torch imported, the
    NVRTC of torch's CUDA major version comes first."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    candidates = list(_CANDIDATES)
    if _torch_cuda_major() == 12:
        candidates.sort(key=lambda c: not c[1].endswith(".12"))
    for sub, lib in candidates:
        for root in spec.submodule_search_locations:
            folder = Path(root) / sub
            if (folder / lib).exists():
                return folder
    return None


def configure() -> str | None:
    """Sets ``SDPA_NVRTC_PATH`` to the pip NVRTC if it is unset; returns the value in use."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    folder = find_nvrtc()
    if folder is not None:
        os.environ[ENV] = str(folder)
        return str(folder)
    return None
