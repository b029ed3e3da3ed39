#!/usr/bin/env python3
"""Time PyTorch SDPA backends (and FlashAttention-3 and FlashInfer when they import) on the exact
cases sdpa-lab benchmarks, with the same protocol.

Input (--cases): a JSON list of cases as `sdpa-lab bench` writes them (record.rs, PeerCase):
  {"suite", "case", "shape": {"batch", "seq_q", "seq_kv", "heads_q", "heads_kv", "head_dim"},
   "precision": "f16" | "bf16" | "fp8_kv_f16" | "fp8_kv_bf16" | "fp8" | "sim_fp8",
   "causal": bool, "mode": "cold" | "hot" | "graph", "warmup": int, "iters": int (>= 100)}

Output (--out): a JSON list of BenchRow-shaped dicts (record.rs, BenchRow), one per case and
backend; `pct_of_ceiling` is left null for the Rust side to fill from its ceilings. The file is
rewritten (temp file + rename) after every row, so an interrupted run leaves valid JSON.

Protocol (the same as the Rust timing loop): timing CUDA events around every timed run; warm-up
runs first; median/p10/p90/p99 by linear interpolation between closest ranks, sample standard
deviation (n - 1), CV = std / mean.
  cold:  a 256 MB buffer is written before every run, flushing L2;
  hot:   runs rotate over input sets whose total size exceeds 2x L2;
  graph: 20 calls captured in one CUDA graph; each timed replay / 20.
Causal masks are bottom-right aligned (FlashAttention convention). PyTorch's `is_causal` is
top-left; the two agree when Sq == Skv, so `is_causal=True` is used then, and an explicit
`causal_lower_right` bias otherwise. Rows say which in `detail`.

A case with a `page_size` is a paged-cache row: only FlashInfer times it, the other backends
skip it (their time is on the contiguous row of the same shape).

FlashInfer (backend `flashinfer`) times decode-shaped cases only (Sq 1) through its paged decode
wrapper: the case's contiguous K and V, cut into pages of the case's `page_size` (else
FLASHINFER_PAGE) tokens, are the paged cache (NHD, no copy, pages in order where our paged rows
scatter them); plan() (which JIT-compiles the kernel with nvcc at its first use of a dtype
combination) runs once before any timing, and each timed run is one run() call. FP8-KV cases
(fp8_kv_*) quantize K and V to E4M3 with the per-tensor scale FP8_KV_SCALE, passed as k_scale and
v_scale; their reference is computed from the dequantized K and V.

FlashAttention-3 also times full-FP8 cases (`fp8`) through its FP8 forward: Q, K and V are the
bf16 normal inputs cast to E4M3 (unit scale: normal values fit), descales of ones per (batch,
kv head), bf16 output; the reference is computed from the E4M3 values and the gate is
REL_L2_GATE_FP8 (E4M3 P's rounding; FA3 measured 0.020-0.026).

cuDNN's FP8 SDPA (backend `cudnn_fp8`, through the cuDNN Python frontend: pip
nvidia-cudnn-frontend, module `cudnn`) times the full-FP8 cases too, on the same E4M3 Q, K, V
(BSHD storage, per-tensor descales of 1; GQA native). Before Blackwell its FP8 forward writes
FP8 only, so O is E4M3 at a power-of-two scale_o taken from the kernel's own Amax_O on an
untimed first run (delayed scaling, half of E4M3's range left as margin); the check dequantizes
O and compares it with the same float64 reference and gate as FA3's, and the row's detail
gives the error that rounding the reference itself to E4M3 at that scale would leave. P is
stored as E4M3 times CUDNN_FP8_SCALE_S. Causal is a diagonal band (TOP_LEFT, right bound
Skv - Sq), which is the bottom-right mask: the frontend takes BOTTOM_RIGHT for FP8 only on
Blackwell. One graph is built per case, outside the timing; each timed run is one execute().

Only the standard library and torch (FA3, FlashInfer and the cuDNN frontend where they import);
torch is imported after the arguments are checked, so --help and argument errors work without
it.
"""

import argparse
import contextlib
import importlib
import json
import math
import os
import sys
import warnings

BACKENDS = ("flash", "cudnn", "efficient", "fa3", "flashinfer", "cudnn_fp8")
# Rows of backends outside PyTorch SDPA name their own implementation.
IMPLEMENTATIONS = {"fa3": "fa3", "flashinfer": "flashinfer", "cudnn_fp8": "cudnn_fp8"}
# FlashAttention-3's Hopper forward, when its Python interface imports (the `flash-attn` Hopper
# build or the `fa3-fwd` wheel); otherwise its rows say it is missing.
FA3_MODULES = ("flash_attn_interface", "fa3_fwd_interface")
# FlashInfer's paged decode (the `flashinfer-python` wheel), for decode-shaped cases: page size
# of the paged view (the largest power of two up to this that divides Skv), the workspace its
# split-KV plan asks for (128 MB, its documented default), and the precisions it runs as
# (Q and output dtype, K/V dtype).
FLASHINFER_PAGE = 64
FLASHINFER_WORKSPACE = 128 << 20
FLASHINFER_DTYPES = {
    "f16": ("float16", "float16"),
    "bf16": ("bfloat16", "bfloat16"),
    "fp8_kv_f16": ("float16", "float8_e4m3fn"),
    "fp8_kv_bf16": ("bfloat16", "float8_e4m3fn"),
}
# Per-tensor FP8 scale of K and V (FlashInfer's FP8-KV rows): unit-variance inputs, +-8 sigma
# mapped onto E4M3's largest finite value, 448.
FP8_KV_SCALE = 8.0 / 448.0
E4M3_MAX = 448.0
GRAPH_CALLS = 20
MIN_ITERS = 100
FLUSH_BYTES = 256 << 20
# Cap on the memory one hot-mode rotation pool may take; past it fewer sets are used and the
# row says so (large shapes exceed 2x L2 on their own anyway).
HOT_POOL_CAP = 8 << 30
PRECISIONS_16 = {"f16": "float16", "bf16": "bfloat16"}
PRECISIONS_FP8 = ("fp8_kv_f16", "fp8_kv_bf16", "fp8", "sim_fp8")
SHAPE_KEYS = ("batch", "seq_q", "seq_kv", "heads_q", "heads_kv", "head_dim")
# Output gate of a peer against the float64 reference: relative L2 error. fp16/bf16 kernels
# land at ~1e-3 (bf16 ~4e-3) on unit-variance inputs; 2e-2 flags only real failures.
REL_L2_GATE = 2e-2
# Full FP8 (FA3's E4M3 P·V): the bound our own FP8 kernel is judged by (metrics.rs).
REL_L2_GATE_FP8 = 5e-2
# cuDNN's FP8 SDPA: P (at most 1 once the running row max is subtracted) is stored as E4M3 times
# this; 128 * 0.25 is what the frontend's own sdpa_fp8 tests use, leaving room for kernels that
# rescale lazily. O's scale is calibrated per case (see the module docstring).
CUDNN_FP8_SCALE_S = 32.0


class UsageError(Exception):
    """Bad arguments or input file: reported with exit status 2."""


def fail(msg):
    print(f"peers.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------- statistics (as stats.rs)


def percentile_sorted(xs, p):
    """Linear interpolation between closest ranks (NumPy default, type 7); xs ascending."""
    if not xs:
        return None
    p = min(max(p, 0.0), 1.0)
    h = p * (len(xs) - 1)
    lo = int(math.floor(h))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def stats(samples_us):
    """The Stats dict of record.rs from per-run times in microseconds."""
    xs = sorted(float(x) for x in samples_us)
    if not xs:
        raise ValueError("no timing samples")
    for x in xs:
        if not math.isfinite(x) or x < 0:
            raise ValueError(f"timing sample {x} is not a finite non-negative time")
    n = len(xs)
    mean = sum(xs) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return {
        "n": n,
        "median_us": percentile_sorted(xs, 0.5),
        "p10_us": percentile_sorted(xs, 0.10),
        "p90_us": percentile_sorted(xs, 0.90),
        "p99_us": percentile_sorted(xs, 0.99),
        "mean_us": mean,
        "std_us": std,
        "cv": std / mean if mean > 0 else 0.0,
        "min_us": xs[0],
        "max_us": xs[-1],
    }


# ---------------------------------------------------------------- work (as flops.rs)


def attended_pairs(shape, causal):
    sq, skv = shape["seq_q"], shape["seq_kv"]
    if causal:
        off = skv - sq
        per_head = sum(min(max(i + off + 1, 0), skv) for i in range(sq))
    else:
        per_head = sq * skv
    return per_head * shape["batch"] * shape["heads_q"]


def flops(shape, causal):
    return 4.0 * attended_pairs(shape, causal) * shape["head_dim"]


def traffic_bytes(shape, elem=2, kv_elem=None, q_elem=None):
    """Each input read once, the output written once (no LSE); 16-bit unless told (K and V
    are 1 byte on the FP8-KV paths, Q too on full FP8, whose output stays 16-bit)."""
    kv_elem = elem if kv_elem is None else kv_elem
    q_elem = elem if q_elem is None else q_elem
    rows = shape["batch"] * shape["seq_q"] * shape["heads_q"] * shape["head_dim"]
    kv = shape["batch"] * shape["seq_kv"] * shape["heads_kv"] * shape["head_dim"] * kv_elem
    return rows * q_elem + rows * elem + 2 * kv


# ---------------------------------------------------------------- arguments and input


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="peers.py",
        description="Time PyTorch SDPA backends (flash, cudnn, efficient), FlashAttention-3 "
        "(fa3, when flash_attn_interface or fa3_fwd_interface imports), FlashInfer's paged "
        "decode (flashinfer, decode cases, when flashinfer imports) and cuDNN's FP8 SDPA "
        "(cudnn_fp8, full-FP8 cases, when the cuDNN frontend's module cudnn imports) on "
        "sdpa-lab's cases with sdpa-lab's protocol. Needs PyTorch with CUDA.",
    )
    ap.add_argument("--cases", required=True, help="JSON list of cases written by sdpa-lab")
    ap.add_argument("--out", required=True, help="where to write the JSON list of rows")
    ap.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated subset of " + ",".join(BACKENDS) + " (default: all)",
    )
    ap.add_argument("--device", default="cuda:0", help="CUDA device (default cuda:0)")
    ap.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    return ap.parse_args(argv)


def parse_backends(text):
    names = [b.strip() for b in text.split(",") if b.strip()]
    if not names:
        raise UsageError("--backends is empty; expected a subset of " + ",".join(BACKENDS))
    for b in names:
        if b not in BACKENDS:
            raise UsageError(f"unknown backend '{b}'; expected a subset of " + ",".join(BACKENDS))
    return list(dict.fromkeys(names))


def load_cases(path):
    if not os.path.isfile(path):
        raise UsageError(f"cases file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise UsageError(f"malformed JSON in {path}: {e}") from None
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a JSON list of cases, got {type(data).__name__}")
    for i, c in enumerate(data):
        where = f"{path}: case {i}"
        if not isinstance(c, dict):
            raise UsageError(f"{where}: expected an object")
        for k in ("suite", "case", "shape", "precision", "causal", "mode", "warmup", "iters"):
            if k not in c:
                raise UsageError(f"{where}: missing field '{k}'")
        shape = c["shape"]
        if not isinstance(shape, dict):
            raise UsageError(f"{where}: 'shape' must be an object")
        for k in SHAPE_KEYS:
            v = shape.get(k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise UsageError(f"{where}: shape.{k} must be a positive integer, got {v!r}")
        if shape["heads_q"] % shape["heads_kv"] != 0:
            raise UsageError(f"{where}: heads_q must be a multiple of heads_kv")
        if c["precision"] not in PRECISIONS_16 and c["precision"] not in PRECISIONS_FP8:
            raise UsageError(f"{where}: unknown precision {c['precision']!r}")
        if c["mode"] not in ("cold", "hot", "graph"):
            raise UsageError(f"{where}: mode must be cold, hot or graph, got {c['mode']!r}")
        if not isinstance(c["causal"], bool):
            raise UsageError(f"{where}: causal must be true or false")
        for k in ("warmup", "iters"):
            if not isinstance(c[k], int) or isinstance(c[k], bool) or c[k] < 0:
                raise UsageError(f"{where}: {k} must be a non-negative integer")
        ps = c.get("page_size")
        if ps is not None and (
            not isinstance(ps, int) or isinstance(ps, bool) or ps < 1 or shape["seq_kv"] % ps
        ):
            raise UsageError(f"{where}: page_size must be a positive divisor of seq_kv, got {ps!r}")
        if c["iters"] < MIN_ITERS:
            raise UsageError(f"{where}: iters {c['iters']} < {MIN_ITERS} (the protocol's minimum)")
    return data


def import_torch():
    try:
        import torch  # noqa: PLC0415 (lazy on purpose: --help and checks work without it)
    except Exception as e:  # ImportError, or a broken install raising anything else
        raise UsageError(
            f"cannot import torch ({type(e).__name__}: {e}); peers need PyTorch with CUDA "
            "(pip install torch) on a machine with an NVIDIA GPU"
        ) from None
    if not torch.cuda.is_available():
        raise UsageError(
            f"torch {torch.__version__} has no usable CUDA device; peers need PyTorch with CUDA"
        )
    return torch


def load_flashinfer():
    """(module, None) when FlashInfer imports, else (None, why); importing it needs torch."""
    try:
        return importlib.import_module("flashinfer"), None
    except Exception as e:  # ImportError, or a wheel that fails on this torch or CUDA
        return None, f"flashinfer: {type(e).__name__}: {one_line(e, 160)}"


def flashinfer_unsupported(case):
    """Why FlashInfer's paged decode does not take `case`, or None when it does: one query row
    per sequence (decode; at Sq 1 a bottom-right causal mask hides nothing) at f16, bf16 or
    FP8-KV."""
    sq = case["shape"]["seq_q"]
    if sq != 1:
        return f"FlashInfer peer covers decode only (seq_q 1), this case has seq_q {sq}"
    if case["precision"] not in FLASHINFER_DTYPES:
        return (
            "FlashInfer peer covers " + ", ".join(FLASHINFER_DTYPES) + f", not {case['precision']}"
        )
    return None


def flashinfer_missing(why):
    """The status of a FlashInfer row when the module does not import."""
    return f"skipped: FlashInfer not installed ({why})"


def load_cudnn_frontend():
    """(module, None) when the cuDNN Python frontend imports, else (None, why). Import torch
    first: the frontend dlopens libcudnn.so.9 (LD_LIBRARY_PATH, then the interpreter's
    site-packages nvidia/cudnn/lib, then the bare soname), and with torch loaded the soname
    resolves to torch's own copy."""
    try:
        return importlib.import_module("cudnn"), None
    except Exception as e:  # ImportError, or a wheel built for another Python
        return None, f"cudnn: {type(e).__name__}: {one_line(e, 160)}"


def cudnn_fp8_unsupported(case):
    """Why the cuDNN FP8 peer does not take `case`, or None when it does."""
    if case["precision"] != "fp8":
        return f"the cuDNN FP8 peer runs full FP8 only, not {case['precision']}"
    sh = case["shape"]
    if case["causal"] and sh["seq_q"] > sh["seq_kv"]:
        # bottom-right causal leaves the first Sq - Skv query rows no key; a diagonal band
        # cannot say that (its right bound would be negative)
        return "causal with seq_q > seq_kv has no cuDNN FP8 mask (bottom-right needs Blackwell)"
    return None


def cudnn_fp8_missing(why):
    """The status of a cudnn_fp8 row when the frontend does not import or has no backend."""
    return f"skipped: cuDNN frontend not usable ({why})"


def pow2_scale(amax, target):
    """The largest power of two s with amax * s <= target (1 when amax is 0 or not finite)."""
    if not (math.isfinite(amax) and amax > 0):
        return 1.0
    return 2.0 ** math.floor(math.log2(target / amax))


def one_line(s, limit=400):
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def write_atomic(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------- the GPU part


def blank_row(case, backend, status):
    """A peer row for `case` with no timings yet (bench.json's row schema)."""
    return {
        "suite": case["suite"],
        "case": case["case"],
        "implementation": IMPLEMENTATIONS.get(backend, "torch"),
        "backend": backend,
        "precision": case["precision"],
        "shape": {k: case["shape"][k] for k in SHAPE_KEYS},
        "causal": case["causal"],
        "mode": case["mode"],
        "stats": None,
        "tflops": None,
        "gbps": None,
        "pct_of_ceiling": None,
        "correctness": None,
        "status": status,
    }


class Runner:
    def __init__(self, torch, device, seed):
        self.torch = torch
        self.device = torch.device(device)
        torch.cuda.set_device(self.device)
        self.seed = seed
        props = torch.cuda.get_device_properties(self.device)
        # L2_cache_size exists in recent torch; 50 MB (H100) is the safe guess otherwise.
        self.l2 = int(getattr(props, "L2_cache_size", 0) or (50 << 20))
        self.flush_buf = None
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.sdpa_kernel = sdpa_kernel
        self.backend_enum = {
            "flash": SDPBackend.FLASH_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION,
        }
        try:
            from torch.nn.attention.bias import causal_lower_right
        except ImportError:
            causal_lower_right = None
        self.causal_lower_right = causal_lower_right
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        self.versions = f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn}"
        self.fa3, self.fa3_missing = None, []
        for name in FA3_MODULES:
            try:
                self.fa3 = importlib.import_module(name)
                self.versions += f", FA3 from {name}"
                break
            except Exception as e:  # ImportError, or a wheel built for another torch
                self.fa3_missing.append(f"{name}: {type(e).__name__}: {one_line(e, 120)}")
        # FlashInfer is imported at its first decode case (a heavy import, and only then needed).
        self.fi, self.fi_missing = None, None
        # The cuDNN frontend likewise, at its first full-FP8 case, with one handle for all.
        self.cfe, self.cfe_missing, self.cfe_handle, self.cfe_backend = None, None, None, None

    def flashinfer(self):
        """FlashInfer's module, imported once; None (with self.fi_missing) when it does not."""
        if self.fi is None and self.fi_missing is None:
            self.fi, self.fi_missing = load_flashinfer()
        return self.fi

    def cudnn_frontend(self):
        """The cuDNN frontend's module with a handle on this device, set up once; None (with
        self.cfe_missing) when it does not import or cannot reach a cuDNN library."""
        if self.cfe is None and self.cfe_missing is None:
            cudnn, why = load_cudnn_frontend()
            if cudnn is not None:
                try:
                    # fails here when no libcudnn was found ("Unable to find symbol ...")
                    self.cfe_backend = cudnn.backend_version()
                    self.cfe_handle = cudnn.create_handle()
                except Exception as e:
                    cudnn, why = None, f"cudnn: {type(e).__name__}: {one_line(e, 160)}"
            self.cfe, self.cfe_missing = cudnn, why
        return self.cfe

    def cudnn_fp8_call(self, case):
        """cuDNN's FP8 SDPA graph for `case`, built outside any timing, the call that runs it
        on make_inputs' E4M3 tensors, and a description. The call returns O as E4M3 (a BHSD
        view of BSHD storage); `call.out_descale` turns it back into attention output."""
        t, cudnn, handle = self.torch, self.cfe, self.cfe_handle
        dt = cudnn.data_type
        sh = case["shape"]
        b, sq, skv = sh["batch"], sh["seq_q"], sh["seq_kv"]
        hq, hkv, d = sh["heads_q"], sh["heads_kv"], sh["head_dim"]
        dev = self.device

        def bshd_strides(s, h):  # make_inputs' BHSD views of BSHD storage
            return (s * h * d, d, h * d, 1)

        graph = cudnn.pygraph(
            io_data_type=dt.FP8_E4M3,
            intermediate_data_type=dt.FLOAT,
            compute_data_type=dt.FLOAT,
            handle=handle,
        )

        def fp8_input(name, s, h):
            return graph.tensor(
                name=name, dim=(b, h, s, d), stride=bshd_strides(s, h), data_type=dt.FP8_E4M3
            )

        # GQA is native: K and V keep their Hkv heads (cuDNN needs Hq % Hkv == 0)
        q_t, k_t, v_t = fp8_input("q", sq, hq), fp8_input("k", skv, hkv), fp8_input("v", skv, hkv)

        def scalar(name, value):  # a 1x1x1x1 fp32 graph tensor and its device buffer
            g = graph.tensor(name=name, dim=(1, 1, 1, 1), stride=(1, 1, 1, 1), data_type=dt.FLOAT)
            return g, t.full((1, 1, 1, 1), value, dtype=t.float32, device=dev)

        # The inputs are unit-scale E4M3 (normal values fit), hence descales of 1.
        scalars = {
            "descale_q": scalar("descale_q", 1.0),
            "descale_k": scalar("descale_k", 1.0),
            "descale_v": scalar("descale_v", 1.0),
            "descale_s": scalar("descale_s", 1.0 / CUDNN_FP8_SCALE_S),
            "scale_s": scalar("scale_s", CUDNN_FP8_SCALE_S),
            "scale_o": scalar("scale_o", 1.0),  # calibrated at the first call
        }
        mask = {}
        if case["causal"]:
            # TOP_LEFT with right bound Skv - Sq is the bottom-right causal mask
            mask = {
                "diagonal_alignment": cudnn.diagonal_alignment.TOP_LEFT,
                "right_bound": skv - sq,
            }
        o_t, _stats, amax_s_t, amax_o_t = graph.sdpa_fp8(
            q_t,
            k_t,
            v_t,
            **{name: g for name, (g, _buf) in scalars.items()},
            generate_stats=False,  # inference: no softmax stats
            attn_scale=1.0 / math.sqrt(d),  # the reference's softmax scale
            name="sdpa_fp8",
            **mask,
        )
        # Hopper's FP8 SDPA writes FP8 only (HALF/BF16 O needs Blackwell and cuDNN 9.13+)
        o_t.set_output(True).set_dim((b, hq, sq, d)).set_stride(bshd_strides(sq, hq))
        o_t.set_data_type(dt.FP8_E4M3)
        for a in (amax_s_t, amax_o_t):
            a.set_output(True).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(dt.FLOAT)
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()
        workspace = t.empty(max(1, graph.get_workspace_size()), dtype=t.uint8, device=dev)
        o = t.empty((b, sq, hq, d), dtype=t.float8_e4m3fn, device=dev).transpose(1, 2)
        amax_s = t.zeros((1, 1, 1, 1), dtype=t.float32, device=dev)
        amax_o = t.zeros((1, 1, 1, 1), dtype=t.float32, device=dev)
        pack = {g: buf for g, buf in scalars.values()}
        pack.update({o_t: o, amax_s_t: amax_s, amax_o_t: amax_o})
        scale_o = scalars["scale_o"][1]

        def run(q, k, v):
            # cuDNN launches on its handle's stream: follow torch's (graph capture included);
            # set_stream is free while the stream is unchanged
            cudnn.set_stream(handle, t.cuda.current_stream().cuda_stream)
            graph.execute({**pack, q_t: q, k_t: k, v_t: v}, workspace, handle=handle)
            return o

        def call_cudnn(q, k, v):
            if call_cudnn.out_descale is None:
                # the first call (time_case's untimed one, before any capture): run at scale_o
                # 1, then scale O by a power of two putting the kernel's own Amax_O at a
                # quarter to a half of E4M3's range (exact in dequantization; margin for
                # other input sets)
                run(q, k, v)
                call_cudnn.amax_o = float(amax_o.item())
                s = pow2_scale(call_cudnn.amax_o, E4M3_MAX / 2)
                scale_o.fill_(s)
                call_cudnn.scale_o, call_cudnn.out_descale = s, 1.0 / s
            return run(q, k, v)

        call_cudnn.out_descale = None
        try:  # frontend 1.27+ says whether one of its Python engines took the graph
            eng = getattr(graph, "selected_engine", None)
        except Exception:
            eng = None
        served = f"frontend engine {eng.name}" if eng is not None else "cuDNN backend engine"
        backend = self.cfe_backend
        torch_cudnn = t.backends.cudnn.version()
        detail = (
            f"cuDNN frontend {getattr(cudnn, '__version__', '?')} sdpa_fp8 on cuDNN {backend}"
            + ("" if backend == torch_cudnn else f" (torch has {torch_cudnn})")
            + f", {served}; E4M3 Q, K, V (BSHD strides), descale_q/k/v 1, scale_s "
            f"{CUDNN_FP8_SCALE_S:g} (descale_s 1/{CUDNN_FP8_SCALE_S:g}), E4M3 O (FP8 output: what "
            "this frontend allows before Blackwell) at a calibrated scale_o, dequantized for the "
            "check"
            + ("; GQA native" if hq != hkv else "")
            + (f"; causal: TOP_LEFT diagonal band, right bound {skv - sq}" if case["causal"] else "")
        )
        return call_cudnn, detail

    def make_inputs(self, shape, dtype, gen):
        """Q, K, V as BSHD storage viewed as BHSD (what SDPA takes), unit-variance normal."""
        t = self.torch
        b, sq, skv = shape["batch"], shape["seq_q"], shape["seq_kv"]
        hq, hkv, d = shape["heads_q"], shape["heads_kv"], shape["head_dim"]

        def one(s, h):
            x = t.randn((b, s, h, d), generator=gen, device=self.device, dtype=t.float32)
            return x.to(dtype).transpose(1, 2)

        return one(sq, hq), one(skv, hkv), one(skv, hkv)

    def fp8_kv(self, x):
        """E4M3 copy of a K or V input (a BHSD view of BSHD storage, kept so) at FP8_KV_SCALE."""
        t = self.torch
        y = (x.transpose(1, 2).to(t.float32) / FP8_KV_SCALE).clamp(-E4M3_MAX, E4M3_MAX)
        return y.to(t.float8_e4m3fn).transpose(1, 2)

    def flashinfer_call(self, case):
        """FlashInfer's paged decode planned for `case` (outside any timing), the call that runs
        it on make_inputs' tensors, and a description."""
        t, fi = self.torch, self.fi
        shape = case["shape"]
        b, skv = shape["batch"], shape["seq_kv"]
        hq, hkv, d = shape["heads_q"], shape["heads_kv"], shape["head_dim"]
        q_name, kv_name = FLASHINFER_DTYPES[case["precision"]]
        q_dtype, kv_dtype = getattr(t, q_name), getattr(t, kv_name)
        fp8 = kv_dtype != q_dtype
        page = case.get("page_size") or math.gcd(skv, FLASHINFER_PAGE)
        pages = skv // page  # per sequence, all full
        dev = self.device
        indptr = t.arange(b + 1, dtype=t.int32, device=dev) * pages
        indices = t.arange(b * pages, dtype=t.int32, device=dev)
        last_page_len = t.full((b,), page, dtype=t.int32, device=dev)
        workspace = t.zeros(FLASHINFER_WORKSPACE, dtype=t.uint8, device=dev)
        wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
        wrapper.plan(
            indptr,
            indices,
            last_page_len,
            hq,
            hkv,
            d,
            page,
            pos_encoding_mode="NONE",
            q_data_type=q_dtype,
            kv_data_type=kv_dtype,
            o_data_type=q_dtype,
        )
        t.cuda.synchronize()
        scales = {"k_scale": FP8_KV_SCALE, "v_scale": FP8_KV_SCALE} if fp8 else {}

        def call_fi(q, k, v):
            # make_inputs' BHSD views sit on BSHD storage: Q is [B, Hq, D] and K, V cut into
            # pages are the NHD paged cache [B * pages, page, Hkv, D]; view() never copies.
            out = wrapper.run(
                q.transpose(1, 2).view(b, hq, d),
                (
                    k.transpose(1, 2).view(b * pages, page, hkv, d),
                    v.transpose(1, 2).view(b * pages, page, hkv, d),
                ),
                **scales,
            )
            return out.view(b, 1, hq, d).transpose(1, 2)

        call_fi.keep = (wrapper, workspace, indptr, indices, last_page_len)
        resolved = getattr(wrapper, "resolved_backend", None)
        detail = (
            f"FlashInfer {getattr(fi, '__version__', '?')} BatchDecodeWithPagedKVCacheWrapper "
            f"(NHD, page {page}, use_tensor_cores=False"
            + (f", backend {resolved}" if resolved else "")
            + "; plan() untimed)"
        )
        if fp8:
            detail += (
                f"; K/V E4M3 at per-tensor scale {FP8_KV_SCALE:.6g} passed as k_scale (folded into "
                "sm_scale) and v_scale (FlashInfer multiplies the output by it, inside the timed "
                "call)"
            )
        if case["causal"]:
            detail += "; causal is a no-op at seq_q 1 (bottom-right)"
        return call_fi, detail

    def call_for(self, case, backend):
        """The call for a case and a description of its mask."""
        if backend == "flashinfer":
            return self.flashinfer_call(case)
        if backend == "cudnn_fp8":
            return self.cudnn_fp8_call(case)
        if backend == "fa3":
            fa3, causal = self.fa3, case["causal"]
            sh = case["shape"]
            # FP8: descales per (batch, kv head), ones (the inputs are unit-scale E4M3)
            descales = {}
            if case["precision"] == "fp8":
                ones = self.torch.ones(
                    (sh["batch"], sh["heads_kv"]), dtype=self.torch.float32, device=self.device
                )
                descales = {"q_descale": ones, "k_descale": ones, "v_descale": ones}

            def call_fa3(q, k, v):
                # FA3 takes BSHD, which is the storage under make_inputs' BHSD views; its causal
                # mask is bottom-right, and GQA is native.
                out = fa3.flash_attn_func(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal, **descales
                )
                out = out[0] if isinstance(out, tuple) else out
                return out.transpose(1, 2)

            return call_fa3, "FlashAttention-3 flash_attn_func" + (
                " (bottom-right causal)" if causal else ""
            ) + ("; E4M3 Q, K, V, unit descales, bf16 out" if descales else "")
        t = self.torch
        F = t.nn.functional
        shape = case["shape"]
        gqa = shape["heads_q"] != shape["heads_kv"]
        kw = {"enable_gqa": True} if gqa else {}
        mask, detail = None, "no mask"
        causal_flag = False
        if case["causal"]:
            if shape["seq_q"] == shape["seq_kv"]:
                causal_flag = True
                detail = "is_causal=True (top-left equals bottom-right as Sq == Skv)"
            elif backend == "efficient" and self.causal_lower_right is not None:
                # CausalBias runs the efficient kernel directly whatever sdpa_kernel selects,
                # so it is used only where that is the backend being timed.
                mask = self.causal_lower_right(shape["seq_q"], shape["seq_kv"])
                detail = "bottom-right via torch.nn.attention.bias.causal_lower_right"
            else:
                i = t.arange(shape["seq_q"], device=self.device)[:, None]
                j = t.arange(shape["seq_kv"], device=self.device)[None, :]
                mask = j <= i + (shape["seq_kv"] - shape["seq_q"])
                detail = "bottom-right via an explicit boolean mask"
        if gqa:
            detail += "; enable_gqa=True"

        def call(q, k, v):
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal_flag, **kw
            )

        return call, detail

    def reference(self, q, k, v, case, kv_scale=1.0):
        """float64 math reference, chunked over (batch, head) and query rows to bound memory;
        K and V are multiplied by `kv_scale` (the dequantization of FP8 K and V)."""
        t = self.torch
        shape = case["shape"]
        b, hq, hkv, d = shape["batch"], shape["heads_q"], shape["heads_kv"], shape["head_dim"]
        sq, skv = shape["seq_q"], shape["seq_kv"]
        group = hq // hkv
        scale = 1.0 / math.sqrt(d)
        out = t.empty((b, hq, sq, d), dtype=t.float64, device=self.device)
        # about 128 MB of float64 scores per chunk
        rows = max(1, min(sq, (16 << 20) // max(skv, 1)))
        for bi in range(b):
            for h in range(hq):
                kk = k[bi, h // group].to(t.float64) * kv_scale
                vv = v[bi, h // group].to(t.float64) * kv_scale
                for r0 in range(0, sq, rows):
                    r1 = min(sq, r0 + rows)
                    s = (q[bi, h, r0:r1].to(t.float64) @ kk.T) * scale
                    if case["causal"]:
                        i = t.arange(r0, r1, device=self.device)[:, None]
                        j = t.arange(skv, device=self.device)[None, :]
                        s = s.masked_fill(j > i + (skv - sq), float("-inf"))
                    p = t.softmax(s, dim=-1)
                    # rows with every key masked give NaN; FlashAttention writes 0 there
                    out[bi, h, r0:r1] = t.nan_to_num(p, nan=0.0) @ vv
        return out

    def correctness(self, o, ref, gate=REL_L2_GATE):
        t = self.torch
        o64 = o.to(t.float64)
        err = (o64 - ref).abs()
        finite = bool(t.isfinite(o64).all())
        max_abs = float(err.max()) if finite else float("inf")
        denom = float(ref.norm())
        rel = float((o64 - ref).norm()) / denom if denom > 0 else float(err.norm())
        if not finite:
            rel = float("inf")
        passed = finite and rel <= gate
        # JSON has no infinities: report non-finite errors as a large sentinel
        big = 1e300
        return {
            "max_abs": max_abs if math.isfinite(max_abs) else big,
            "rel_l2": rel if math.isfinite(rel) else big,
            "passed": passed,
        }

    def flush_l2(self):
        if self.flush_buf is None:
            self.flush_buf = self.torch.empty(FLUSH_BYTES, dtype=self.torch.uint8, device=self.device)
        self.flush_buf.zero_()

    def time_case(self, case, backend, call, inputs_fn, set_bytes):
        """Per-run microseconds for one backend; the note describes what was done."""
        t = self.torch
        mode, warmup, iters = case["mode"], case["warmup"], case["iters"]
        note = ""
        only = (
            self.sdpa_kernel([self.backend_enum[backend]])
            if backend in self.backend_enum
            else contextlib.nullcontext()
        )
        with only:
            sets = [inputs_fn(0)]
            q, k, v = sets[0]
            call(q, k, v)  # raises here if the backend rejects the case
            t.cuda.synchronize()
            if mode == "hot":
                want = 2 * self.l2 // max(set_bytes, 1) + 1
                fit = max(1, HOT_POOL_CAP // max(set_bytes, 1))
                n_sets = max(2, min(want, fit))
                if n_sets * set_bytes <= 2 * self.l2:
                    note = f"hot pool {n_sets} sets, under 2x L2 (memory cap)"
                sets += [inputs_fn(i) for i in range(1, n_sets)]
            starts = [t.cuda.Event(enable_timing=True) for _ in range(iters)]
            ends = [t.cuda.Event(enable_timing=True) for _ in range(iters)]
            if mode == "graph":
                stream = t.cuda.Stream()
                stream.wait_stream(t.cuda.current_stream())
                with t.cuda.stream(stream):
                    for _ in range(3):  # warm the allocator and autotuners before capture
                        call(q, k, v)
                t.cuda.current_stream().wait_stream(stream)
                graph = t.cuda.CUDAGraph()
                with t.cuda.graph(graph):
                    for _ in range(GRAPH_CALLS):
                        call(q, k, v)
                for _ in range(warmup):
                    graph.replay()
                t.cuda.synchronize()
                for i in range(iters):
                    starts[i].record()
                    graph.replay()
                    ends[i].record()
                t.cuda.synchronize()
                per = GRAPH_CALLS
            else:
                for i in range(warmup):
                    if mode == "cold":
                        self.flush_l2()
                    call(*sets[i % len(sets)])
                t.cuda.synchronize()
                for i in range(iters):
                    if mode == "cold":
                        self.flush_l2()
                    qq, kk, vv = sets[i % len(sets)]
                    starts[i].record()
                    call(qq, kk, vv)
                    ends[i].record()
                t.cuda.synchronize()
                per = 1
            us = [s.elapsed_time(e) * 1e3 / per for s, e in zip(starts, ends)]
            out = call(q, k, v)
            t.cuda.synchronize()
        return us, out, (q, k, v), note

    def run_case(self, case, backend):
        t = self.torch
        shape = case["shape"]
        row = blank_row(case, backend, "ok")
        fp8_kv = fp8_all = False
        if case.get("page_size") and backend != "flashinfer":
            # a paged-cache row: only FlashInfer reads pages; the contiguous row of the same
            # shape carries this backend's time
            row["status"] = "skipped: no paged KV cache in this backend"
            return row
        if backend == "flashinfer":
            why = flashinfer_unsupported(case)
            if why is not None:
                row["status"] = "skipped: " + why
                return row
            if self.flashinfer() is None:
                row["status"] = flashinfer_missing(self.fi_missing)
                return row
            q_name, kv_name = FLASHINFER_DTYPES[case["precision"]]
            dtype, fp8_kv = getattr(t, q_name), kv_name != q_name
        elif backend == "cudnn_fp8":
            why = cudnn_fp8_unsupported(case)
            if why is not None:
                row["status"] = "skipped: " + why
                return row
            if self.cudnn_frontend() is None:
                row["status"] = cudnn_fp8_missing(self.cfe_missing)
                return row
            dtype, fp8_all = t.bfloat16, True  # cast to E4M3 in inputs_fn, as for FA3
        elif backend == "fa3" and case["precision"] == "fp8" and self.fa3 is not None:
            dtype, fp8_all = t.bfloat16, True  # cast to E4M3 in inputs_fn
        elif case["precision"] in PRECISIONS_FP8:
            row["status"] = "skipped: " + (
                "FlashAttention-3 not installed (" + "; ".join(self.fa3_missing) + ")"
                if backend == "fa3" and case["precision"] == "fp8"
                else "PyTorch SDPA has no FP8 kernel"
                if backend != "fa3"
                else "the FlashAttention-3 peer runs full FP8 only, not " + case["precision"]
            )
            return row
        elif backend == "fa3" and self.fa3 is None:
            row["status"] = "skipped: FlashAttention-3 not installed (" + "; ".join(self.fa3_missing) + ")"
            return row
        else:
            dtype = getattr(t, PRECISIONS_16[case["precision"]])
        try:
            call, detail = self.call_for(case, backend)
        except Exception as e:  # FlashInfer's plan (its JIT build included) or cuDNN's graph
            msg = f"{type(e).__name__}: {e}"
            # a build log runs long: all of it goes to stderr, its start to the row
            print(f"{case['suite']}/{case['case']} {backend}: {msg}", file=sys.stderr)
            refused = backend == "cudnn_fp8" and isinstance(
                e, getattr(self.cfe, "cudnnGraphNotSupportedError", ())
            )
            why = "skipped: cuDNN does not support this graph: " if refused else "failed: "
            row["status"] = why + one_line(msg)
            t.cuda.empty_cache()
            return row
        row["detail"] = f"{self.versions}; {detail}"

        def inputs_fn(i):
            gen = t.Generator(device=self.device)
            gen.manual_seed(self.seed * 1000003 + i)
            q, k, v = self.make_inputs(shape, dtype, gen)
            if fp8_kv:
                k, v = self.fp8_kv(k), self.fp8_kv(v)
            if fp8_all:  # .to keeps the BSHD storage under the BHSD views
                q, k, v = (x.to(t.float8_e4m3fn) for x in (q, k, v))
            return q, k, v

        sh = shape
        kv_elem = 1 if fp8_kv or fp8_all else 2
        q_bytes = sh["batch"] * sh["seq_q"] * sh["heads_q"] * sh["head_dim"] * (1 if fp8_all else 2)
        kv_bytes = sh["batch"] * sh["seq_kv"] * sh["heads_kv"] * sh["head_dim"] * kv_elem
        set_bytes = q_bytes + 2 * kv_bytes  # Q, K, V of one input set
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    us, out, (q, k, v), note = self.time_case(case, backend, call, inputs_fn, set_bytes)
                except RuntimeError as e:
                    msg = str(e)
                    if "out of memory" in msg.lower():
                        row["status"] = "failed: CUDA out of memory"
                        return row
                    # torch explains a rejected backend in warnings; keep them with the error
                    reasons = [str(w.message) for w in caught]
                    why = "; ".join([msg] + reasons)
                    row["status"] = "skipped: " + one_line(why)
                    return row
        finally:
            t.cuda.empty_cache()
        s = stats(us)
        row["stats"] = s
        med = s["median_us"]
        if med > 0:
            row["tflops"] = flops(shape, case["causal"]) / (med * 1e-6) / 1e12
            q_elem = 1 if fp8_all else 2
            out_elem = 1 if backend == "cudnn_fp8" else 2  # cuDNN's O is E4M3
            row["gbps"] = (
                traffic_bytes(shape, elem=out_elem, kv_elem=kv_elem, q_elem=q_elem) / (med * 1e-6) / 1e9
            )
        if note:
            row["detail"] += "; " + note
        try:
            ref = self.reference(q, k, v, case, FP8_KV_SCALE if fp8_kv else 1.0)
            if backend == "cudnn_fp8":
                scale = call.scale_o
                out = out.to(t.float32) * call.out_descale
                # what E4M3 output alone costs: the reference rounded at the same scale
                rounded = (ref * scale).clamp(-E4M3_MAX, E4M3_MAX).to(t.float32)
                rounded = rounded.to(t.float8_e4m3fn).to(t.float64) / scale
                floor = float((rounded - ref).norm()) / max(float(ref.norm()), 1e-300)
                del rounded
                row["detail"] += (
                    f"; scale_o {scale:g} from Amax_O {call.amax_o:.4g} (first run at scale_o 1); "
                    f"E4M3 rounding of the reference O alone: rel L2 {floor:.4f}"
                )
            row["correctness"] = self.correctness(out, ref, REL_L2_GATE_FP8 if fp8_all else REL_L2_GATE)
            if not row["correctness"]["passed"]:
                row["status"] = "failed: output differs from the float64 reference"
        except RuntimeError as e:
            row["detail"] += "; reference not computed: " + one_line(e, 200)
        finally:
            del out, call
            t.cuda.empty_cache()
        return row


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        backends = parse_backends(args.backends)
        cases = load_cases(args.cases)
        out_dir = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(out_dir):
            raise UsageError(f"output folder does not exist: {out_dir}")
        torch = import_torch()
        try:
            runner = Runner(torch, args.device, args.seed)
        except (RuntimeError, ValueError, AssertionError) as e:
            raise UsageError(f"cannot use device {args.device}: {one_line(e)}") from None
    except UsageError as e:
        fail(str(e))
    rows = []
    write_atomic(args.out, rows)
    for case in cases:
        for backend in backends:
            try:
                row = runner.run_case(case, backend)
            except KeyboardInterrupt:
                print("peers.py: interrupted; rows so far are in " + args.out, file=sys.stderr)
                return 130
            except Exception as e:  # one broken case must not lose the others
                row = blank_row(case, backend, "failed: " + one_line(f"{type(e).__name__}: {e}"))
            rows.append(row)
            write_atomic(args.out, rows)
            med = row["stats"]["median_us"] if row["stats"] else None
            shown = f"{med:.2f} us" if med is not None else row["status"]
            print(f"{case['suite']}/{case['case']} {case['precision']} {backend}: {shown}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
