"""Fake tensors: the duck-typed attributes fp8_sdpa reads of a torch.Tensor (data_ptr(),
shape, stride(), dtype, device, is_contiguous()), with no torch and no GPU. Their data
pointers are addresses in a made-up device space, never dereferenced: every test stops at
validation, before any device use."""

import itertools

import pytest


class FakeDevice:
    def __init__(self, type="cuda", index=0):
        self.type = type
        self.index = index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class FakeDtype:
    SIZES = {"float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float32": 4, "int32": 4,
             "int64": 8, "float64": 8}

    def __init__(self, name):
        self.name = name
        self.itemsize = self.SIZES[name]

    def __str__(self):
        return f"torch.{self.name}"


def contiguous_strides(shape):
    strides, n = [], 1
    for d in reversed(shape):
        strides.append(n)
        n *= d
    return tuple(reversed(strides))


_addresses = itertools.count(1)


class FakeTensor:
    def __init__(self, shape, dtype="float16", strides=None, device="cuda", index=0, ptr=None):
        self._shape = tuple(shape)
        self._strides = tuple(strides) if strides is not None else contiguous_strides(shape)
        self.dtype = FakeDtype(dtype)
        self.device = FakeDevice(device, index)
        # Each tensor in a 1 TiB slot of its own, 256-byte aligned (as cudaMalloc's).
        self._ptr = ptr if ptr is not None else (0x7F00_0000_0000 + next(_addresses) * (1 << 40))

    @property
    def shape(self):
        return self._shape

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr

    def is_contiguous(self):
        return self._strides == contiguous_strides(self._shape)

    def dim(self):
        return len(self._shape)


@pytest.fixture
def T():
    return FakeTensor
