"""CPU-side tests of the fp8_sdpa package: import, argument errors, dtype and layout mapping.
No GPU and no torch: tensors are fakes (conftest.py), and every call stops at the library's
validation, which runs before any device use."""

import sys

import pytest

import fp8_sdpa
from fp8_sdpa import _native, interface
from conftest import FakeTensor

B, S, HQ, HK, D = 2, 128, 8, 2, 128


def qkv(dtype_q="float16", dtype_kv=None, shape_q=(B, S, HQ, D), shape_kv=(B, S, HK, D)):
    dtype_kv = dtype_kv or dtype_q
    return (FakeTensor(shape_q, dtype_q), FakeTensor(shape_kv, dtype_kv),
            FakeTensor(shape_kv, dtype_kv))


class Reached(Exception):
    """Raised where the Python layer would import torch to allocate the outputs."""


@pytest.fixture
def no_torch(monkeypatch):
    """Stops a call where it would allocate outputs, i.e. once validation has passed."""

    def stop():
        raise Reached

    monkeypatch.setattr(interface, "_torch", stop)


# ------------------------------------------------------------------------ import


def test_import_exposes_flash_attention_api_without_importing_torch():
    for name in ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
                 "quantize_e4m3", "set_value_checks", "__version__"]:
        assert hasattr(fp8_sdpa, name), name
    assert fp8_sdpa.__version__ == _native.__version__
    assert "torch" not in sys.modules


def test_native_extension_is_abi3():
    # One wheel for every CPython >= 3.9: the extension's file name carries no version tag.
    assert _native.__file__.endswith(".abi3.so"), _native.__file__


def test_device_count_without_a_driver_is_zero_not_an_error():
    assert isinstance(fp8_sdpa.device_count(), int)


def test_nvrtc_found_in_the_nvidia_wheel(tmp_path, monkeypatch):
    from fp8_sdpa import _nvrtc

    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnvrtc.so.13").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("SDPA_NVRTC_PATH", raising=False)
    assert _nvrtc.configure() == str(lib)
    assert _nvrtc.os.environ["SDPA_NVRTC_PATH"] == str(lib)
    # A user's own choice is kept.
    monkeypatch.setenv("SDPA_NVRTC_PATH", "/opt/mine")
    assert _nvrtc.configure() == "/opt/mine"


def test_nvrtc_cuda12_wheel_layout(tmp_path, monkeypatch):
    from fp8_sdpa import _nvrtc

    lib = tmp_path / "nvidia" / "cuda_nvrtc" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnvrtc.so.12").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _nvrtc.find_nvrtc() == lib


# ------------------------------------------------------------------------ dtype and layout


@pytest.mark.parametrize("torch_name,lib_name", [
    ("float16", "f16"), ("bfloat16", "bf16"), ("float8_e4m3fn", "e4m3"),
])
def test_dtype_maps_to_library_dtype(torch_name, lib_name):
    dtype, *_ = _native.describe(FakeTensor((1, 16, 2, 64), torch_name))
    assert dtype == lib_name


def test_unknown_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="torch.float64"):
        _native.describe(FakeTensor((1, 16, 2, 64), "float64"))


def test_fa_layout_is_bshd_with_its_strides():
    t = FakeTensor((B, S, HQ, D), "bfloat16")
    _, shape, strides, nbytes = _native.describe(t)
    assert shape == [B, S, HQ, D]
    assert strides == [S * HQ * D, HQ * D, D, 1]
    assert nbytes == B * S * HQ * D * 2


def test_transposed_bhsd_view_keeps_its_strides():
    # q = x.transpose(1, 2) for x of shape (B, H, S, D): FA's layout over BHSD memory.
    t = FakeTensor((B, S, HQ, D), "float16", strides=(HQ * S * D, D, S * D, 1))
    _, shape, strides, nbytes = _native.describe(t)
    assert shape == [B, S, HQ, D]
    assert strides == [HQ * S * D, D, S * D, 1]
    assert nbytes == B * S * HQ * D * 2


def test_packed_varlen_layout_is_one_batch():
    t = FakeTensor((300, HK, D), "float16")
    _, shape, strides, _ = _native.describe(t, packed=True)
    assert shape == [1, 300, HK, D]
    assert strides == [0, HK * D, D, 1]


def test_qkv_sliced_from_packed_buffer():
    # q, k, v = qkv.unbind(2) for qkv (B, S, 3, H, D): every token stride is 3*H*D.
    base = 0x7E00_0000_0000
    strides = (S * 3 * HQ * D, 3 * HQ * D, D, 1)
    q, k, v = (FakeTensor((B, S, HQ, D), "float16", strides=strides, ptr=base + i * HQ * D * 2)
               for i in range(3))
    plan = _native.plan_dense(q, k, v)
    assert (plan["nheads"], plan["nheads_k"], plan["seqlen_q"]) == (HQ, HQ, S)


@pytest.mark.parametrize("dq,dkv,precision,out", [
    ("float16", "float16", "f16", "float16"),
    ("bfloat16", "bfloat16", "bf16", "bfloat16"),
    ("float16", "float8_e4m3fn", "fp8kv_f16", "float16"),
    ("bfloat16", "float8_e4m3fn", "fp8kv_bf16", "bfloat16"),
    ("float8_e4m3fn", "float8_e4m3fn", "fp8", "bfloat16"),
])
def test_precision_path_and_output_dtype(dq, dkv, precision, out):
    q, k, v = qkv(dq, dkv)
    ds = lambda h: FakeTensor((B, h), "float32")  # noqa: E731
    qd = ds(HQ) if dq == "float8_e4m3fn" else None
    kd, vd = (ds(HK), ds(HK)) if dkv == "float8_e4m3fn" else (None, None)
    plan = _native.plan_dense(q, k, v, qd, kd, vd, None, True, True)
    assert plan["precision"] == precision
    assert plan["out_dtype"] == out
    assert (plan["batch"], plan["seqlen_q"], plan["seqlen_k"]) == (B, S, S)
    assert (plan["nheads"], plan["nheads_k"], plan["headdim"]) == (HQ, HK, D)
    assert plan["softmax_scale"] == pytest.approx(D ** -0.5)


@pytest.mark.parametrize("shape,strides", [
    ((HK,), None),                 # per head
    ((B, HK), None),               # per (batch, head): FlashAttention 3's shape
    ((1, HK), None),               # one row: per head
    ((B, HK), (0, 1)),             # (HK,) expanded over the batch: per head
])
def test_descale_shapes_accepted(shape, strides):
    q, k, v = qkv("float16", "float8_e4m3fn")
    d = FakeTensor(shape, "float32", strides=strides)
    assert _native.plan_dense(q, k, v, None, d, d)["precision"] == "fp8kv_f16"


def test_valid_call_passes_validation_before_torch(no_torch):
    q, k, v = qkv("bfloat16")
    with pytest.raises(Reached):
        fp8_sdpa.flash_attn_func(q, k, v, causal=True)


# ------------------------------------------------------------------------ argument errors


def refused(match, fn=fp8_sdpa.flash_attn_func, *args, **kw):
    with pytest.raises(ValueError, match=match) as e:
        fn(*args, **kw)
    return str(e.value)


def test_wrong_rank(no_torch):
    q = FakeTensor((S, HQ, D))
    _, k, v = qkv()
    refused(r"q must be 4-d \(batch, seqlen, nheads, headdim\)", fp8_sdpa.flash_attn_func,
            q, k, v)


def test_mismatched_heads(no_torch):
    q, k, v = qkv(shape_q=(B, S, 6, D), shape_kv=(B, S, 4, D))
    msg = refused("must be a multiple of heads_kv", fp8_sdpa.flash_attn_func, q, k, v)
    # The library's message, through unchanged.
    assert msg.startswith("invalid attention input: heads_q (6)")


def test_unsupported_head_dim(no_torch):
    q, k, v = qkv(shape_q=(B, S, HQ, 96), shape_kv=(B, S, HK, 96))
    refused("head dim 96 is not supported; use 64, 128 or 256", fp8_sdpa.flash_attn_func,
            q, k, v)


def test_head_dims_differ(no_torch):
    q, k, v = qkv(shape_q=(B, S, HQ, 128), shape_kv=(B, S, HK, 64))
    refused("head dim 128 and K/V head dim 64 differ", fp8_sdpa.flash_attn_func, q, k, v)


def test_batch_differs(no_torch):
    q, k, v = qkv(shape_kv=(B + 1, S, HK, D))
    refused("batch", fp8_sdpa.flash_attn_func, q, k, v)


def test_non_cuda_device(no_torch):
    q, k, v = qkv()
    q = FakeTensor(q.shape, "float16", device="cpu", index=None)
    refused("q is on device 'cpu', not a CUDA device", fp8_sdpa.flash_attn_func, q, k, v)


def test_tensors_on_two_gpus(no_torch):
    q, k, v = qkv()
    v = FakeTensor(v.shape, "float16", index=1)
    refused("q is on cuda:0 but v on cuda:1", fp8_sdpa.flash_attn_func, q, k, v)


def test_q_and_kv_dtypes_without_a_path(no_torch):
    q, k, v = qkv("float16", "bfloat16")
    refused("no precision path takes Q f16 with K bf16", fp8_sdpa.flash_attn_func, q, k, v)


def test_fp8_kv_needs_descales(no_torch):
    q, k, v = qkv("bfloat16", "float8_e4m3fn")
    refused("K is e4m3 and needs a descale vector", fp8_sdpa.flash_attn_func, q, k, v)


def test_descale_on_unscaled_tensor(no_torch):
    q, k, v = qkv("bfloat16")
    d = FakeTensor((HK,), "float32")
    refused("K is bf16, which takes no descale", fp8_sdpa.flash_attn_func, q, k, v,
            k_descale=d)


def test_descale_dtype_and_length(no_torch):
    q, k, v = qkv("float16", "float8_e4m3fn")
    refused("k_descale must be float32", fp8_sdpa.flash_attn_func, q, k, v,
            k_descale=FakeTensor((HK,), "float16"), v_descale=FakeTensor((HK,), "float32"))
    refused("K descale has 3 values, expected 2", fp8_sdpa.flash_attn_func, q, k, v,
            k_descale=FakeTensor((3,), "float32"), v_descale=FakeTensor((HK,), "float32"))


def test_non_contiguous_head_dim(no_torch):
    q, k, v = qkv()
    q = FakeTensor(q.shape, "float16", strides=(S * HQ * D * 2, HQ * D * 2, D * 2, 2))
    refused("Q's last dim must be contiguous", fp8_sdpa.flash_attn_func, q, k, v)


def test_misaligned_pointer(no_torch):
    q, k, v = qkv()
    q = FakeTensor(q.shape, "float16", ptr=q.data_ptr() + 2)
    refused("not 16-byte aligned", fp8_sdpa.flash_attn_func, q, k, v)


def test_bad_softmax_scale(no_torch):
    q, k, v = qkv()
    refused("softmax scale must be finite and > 0", fp8_sdpa.flash_attn_func, q, k, v,
            softmax_scale=-1.0)


@pytest.mark.parametrize("option", [
    {"dropout_p": 0.1}, {"window_size": (128, 0)}, {"softcap": 30.0},
    {"alibi_slopes": FakeTensor((HQ,), "float32")},
])
def test_fa_options_not_implemented(option):
    q, k, v = qkv()
    with pytest.raises(NotImplementedError, match="fp8-sdpa does not implement"):
        fp8_sdpa.flash_attn_func(q, k, v, **option)


def test_default_fa_options_accepted(no_torch):
    q, k, v = qkv()
    with pytest.raises(Reached):
        fp8_sdpa.flash_attn_func(q, k, v, dropout_p=0.0, window_size=[-1, -1], softcap=0.0,
                                 deterministic=True)


def test_run_validates_before_device_use():
    # An output overlapping Q can only be seen at run time (plan places outputs fresh); it
    # is a ValueError from validation, not a driver error, though this machine has no GPU.
    q, k, v = qkv()
    with pytest.raises(ValueError, match="O overlaps Q"):
        _native.run_dense(q, k, v, q, None, None, None, None, None, False, 0, 0, True)


@pytest.mark.skipif(_native.device_count() > 0, reason="fake pointers must not reach a GPU")
def test_valid_run_reaches_the_device_and_fails_there_without_one():
    q, k, v = qkv()
    o = FakeTensor(q.shape, "float16")
    with pytest.raises(RuntimeError, match="CUDA driver"):
        _native.run_dense(q, k, v, o, None, None, None, None, None, False, 0, 0, True)


# ------------------------------------------------------------------------ varlen


def varlen(total_q=300, total_k=500, hq=HQ, hk=HK, d=D, n=3, dtype="float16"):
    return (FakeTensor((total_q, hq, d), dtype), FakeTensor((total_k, hk, d), dtype),
            FakeTensor((total_k, hk, d), dtype), FakeTensor((n + 1,), "int32"),
            FakeTensor((n + 1,), "int32"))


def test_varlen_plan():
    q, k, v, cq, ck = varlen()
    plan = _native.plan_varlen(q, k, v, cq, ck, 200, 300, return_lse=True)
    assert (plan["batch"], plan["seqlen_q"], plan["seqlen_k"]) == (3, 200, 300)


def test_varlen_wrong_rank(no_torch):
    _, k, v, cq, ck = varlen()
    q = FakeTensor((1, 300, HQ, D))
    refused(r"q of a varlen call must be 3-d \(total_tokens, nheads, headdim\)",
            fp8_sdpa.flash_attn_varlen_func, q, k, v, cq, ck, 100, 100)


def test_varlen_offsets_must_be_int32(no_torch):
    q, k, v, cq, _ = varlen()
    ck = FakeTensor((4,), "int64")
    refused("has dtype torch.int64", fp8_sdpa.flash_attn_varlen_func, q, k, v, cq, ck, 100, 100)


def test_varlen_offset_counts_differ(no_torch):
    q, k, v, cq, _ = varlen()
    ck = FakeTensor((3,), "int32")
    refused("cu_seqlens_q holds 4 offsets and cu_seqlens_k 3",
            fp8_sdpa.flash_attn_varlen_func, q, k, v, cq, ck, 100, 100)


def test_varlen_max_seqlen_past_tokens(no_torch):
    q, k, v, cq, ck = varlen()
    refused("max_seqlen_q = 301 must be 1..=300", fp8_sdpa.flash_attn_varlen_func,
            q, k, v, cq, ck, 301, 100)


def test_varlen_paged_not_implemented():
    q, k, v, cq, ck = varlen()
    with pytest.raises(NotImplementedError):
        fp8_sdpa.flash_attn_varlen_func(q, k, v, cq, ck, 100, 100,
                                        block_table=FakeTensor((3, 4), "int32"))


# ------------------------------------------------------------------------ kv cache


def test_dense_cache_read_as_pages():
    q = FakeTensor((B, 1, HQ, D), "bfloat16")
    k = FakeTensor((B, 1024, HK, D), "bfloat16")
    v = FakeTensor((B, 1024, HK, D), "bfloat16")
    plan = _native.plan_kvcache(q, k, v)
    assert (plan["page_size"], plan["batch_pages"], plan["pages_per_seq"]) == (256, 4, 4)
    assert plan["seqlen_k"] == 1024


def test_dense_cache_with_padded_batch_stride():
    # A cache sliced out of one twice as long: each sequence still starts a page.
    q = FakeTensor((B, 1, HQ, D), "float16")
    strides = (2048 * HK * D, HK * D, D, 1)
    k = FakeTensor((B, 1024, HK, D), "float16", strides=strides)
    v = FakeTensor((B, 1024, HK, D), "float16", strides=strides)
    plan = _native.plan_kvcache(q, k, v, FakeTensor((B,), "int32"))
    assert (plan["page_size"], plan["batch_pages"]) == (256, 8)


def test_dense_cache_of_odd_length_is_one_page():
    q = FakeTensor((B, 1, HQ, D))
    k, v = FakeTensor((B, 100, HK, D)), FakeTensor((B, 100, HK, D))
    plan = _native.plan_kvcache(q, k, v)
    assert (plan["page_size"], plan["batch_pages"], plan["pages_per_seq"]) == (100, 1, 1)


def test_dense_cache_length_without_a_page_size(no_torch):
    q = FakeTensor((B, 1, HQ, D))
    k, v = FakeTensor((B, 1009, HK, D)), FakeTensor((B, 1009, HK, D))
    refused("seqlen_cache \\(1009\\) must have a divisor in that range",
            fp8_sdpa.flash_attn_with_kvcache, q, k, v)


def test_paged_cache_plan_and_page_size_limit(no_torch):
    q = FakeTensor((B, 1, HQ, D))
    k, v = FakeTensor((64, 16, HK, D)), FakeTensor((64, 16, HK, D))
    table, lens = FakeTensor((B, 8), "int32"), FakeTensor((B,), "int32")
    plan = _native.plan_kvcache(q, k, v, lens, table)
    assert (plan["page_size"], plan["max_pages"], plan["seqlen_k"]) == (16, 8, 128)
    k8, v8 = FakeTensor((64, 8, HK, D)), FakeTensor((64, 8, HK, D))
    refused("page size 8", fp8_sdpa.flash_attn_with_kvcache, q, k8, v8,
            cache_seqlens=lens, block_table=table)


def test_paged_block_table_rows(no_torch):
    q = FakeTensor((B, 1, HQ, D))
    k, v = FakeTensor((64, 16, HK, D)), FakeTensor((64, 16, HK, D))
    refused("block table holds 8 entries but needs batch x max_pages = 2 x 8",
            fp8_sdpa.flash_attn_with_kvcache, q, k, v,
            cache_seqlens=FakeTensor((B,), "int32"), block_table=FakeTensor((1, 8), "int32"))


def test_fp8_cache_needs_descales(no_torch):
    q = FakeTensor((B, 1, HQ, D), "bfloat16")
    k = FakeTensor((B, 256, HK, D), "float8_e4m3fn")
    v = FakeTensor((B, 256, HK, D), "float8_e4m3fn")
    refused("needs a descale", fp8_sdpa.flash_attn_with_kvcache, q, k, v)
    d = FakeTensor((B, HK), "float32")
    plan = _native.plan_kvcache(q, k, v, k_descale=d, v_descale=d)
    assert plan["precision"] == "fp8kv_bf16"


@pytest.mark.parametrize("option", [
    {"cache_batch_idx": FakeTensor((B,), "int32")}, {"rotary_cos": FakeTensor((S, D // 2))},
])
def test_kvcache_options_not_implemented(option):
    q = FakeTensor((B, 1, HQ, D))
    k, v = FakeTensor((B, 256, HK, D)), FakeTensor((B, 256, HK, D))
    with pytest.raises(NotImplementedError):
        fp8_sdpa.flash_attn_with_kvcache(q, k, v, **option)


def test_kvcache_append_needs_both_k_and_v():
    q = FakeTensor((B, 1, HQ, D))
    k, v = FakeTensor((B, 256, HK, D)), FakeTensor((B, 256, HK, D))
    refused("both k and v", fp8_sdpa.flash_attn_with_kvcache, q, k, v, k=FakeTensor((B, 1, HK, D)))


def test_kvcache_int_seqlens_reach_allocation(no_torch):
    q = FakeTensor((B, 1, HQ, D))
    k, v = FakeTensor((B, 256, HK, D)), FakeTensor((B, 256, HK, D))
    with pytest.raises(Reached):
        fp8_sdpa.flash_attn_with_kvcache(q, k, v, cache_seqlens=100, causal=True)


# ------------------------------------------------------------------------ quantizer


def test_quantize_plan():
    plan = _native.plan_quantize(FakeTensor((B, S, HK, D), "bfloat16"))
    assert (plan["batch"], plan["nheads"]) == (B, HK)


def test_quantize_takes_16_bit_input(no_torch):
    refused("quantize takes f16 or bf16 input, not e4m3", fp8_sdpa.quantize_e4m3,
            FakeTensor((B, S, HK, D), "float8_e4m3fn"))


def test_quantize_needs_contiguous_last_dim(no_torch):
    x = FakeTensor((B, S, HK, D), "float16", strides=(S * HK * D * 2, HK * D * 2, D * 2, 2))
    refused("contiguous last dim", fp8_sdpa.quantize_e4m3, x)


# ------------------------------------------------------------ writing into a paged cache


def write_args(dtype="float16", cache="float16", tokens=5, heads=2, dim=64, pages=8, page=16):
    k = FakeTensor((tokens, heads, dim), dtype)
    v = FakeTensor((tokens, heads, dim), dtype)
    kc = FakeTensor((pages, page, heads, dim), cache)
    vc = FakeTensor((pages, page, heads, dim), cache)
    slots = FakeTensor((tokens,), "int32")
    return k, v, kc, vc, slots


def test_a_valid_cache_write_plans():
    assert _native.plan_write_kv(*write_args()) is None
    ds = FakeTensor((2,), "float32")
    assert _native.plan_write_kv(*write_args(cache="float8_e4m3fn"), ds, ds) is None


def test_bad_cache_writes_are_refused_with_the_reason():
    k, v, kc, vc, slots = write_args()
    refused("pools must both be", _native.plan_write_kv, k, v, kc,
            FakeTensor(vc.shape, "bfloat16"), slots)
    refused("need a descale per head", _native.plan_write_kv, *write_args(cache="float8_e4m3fn"))
    ds = FakeTensor((2,), "float32")
    refused("take no descales", _native.plan_write_kv, k, v, kc, vc, slots, ds, ds)
    refused("at least 5 entries", _native.plan_write_kv, k, v, kc, vc, FakeTensor((4,), "int32"))
    refused("must be contiguous", _native.plan_write_kv, k, v,
            FakeTensor(kc.shape, strides=(16 * 2 * 128, 2 * 128, 128, 1)), vc, slots)
    refused("page_size 16..=256", _native.plan_write_kv, *write_args(page=8))
    refused("both k_scale and v_scale", _native.plan_write_kv, k, v, kc, vc, slots, ds)
    refused("must be 3-d", _native.plan_write_kv, FakeTensor((1, 5, 2, 64)), v, kc, vc, slots)
