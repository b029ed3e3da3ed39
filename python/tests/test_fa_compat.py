"""The runner of FlashAttention's tests (python/fa_compat/run_fa_tests.py): its forward-only
rewrite removes exactly the gradient statements, and its deselection names a reason for
every parameter the library does not implement. No GPU, no torch."""

import importlib.util
import textwrap
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[1] / "fa_compat" / "run_fa_tests.py"


def _runner():
    spec = importlib.util.spec_from_file_location("run_fa_tests", RUNNER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SAMPLE = textwrap.dedent('''
    def helper(x):
        dq = x  # not a test: left alone
        return dq

    def test_output(q, k, v):
        out = attn(q, k, v)
        out_ref = ref(q, k, v)
        g = torch.randn_like(out)
        if big:
            (dq, dk, dv) = torch.autograd.grad(out, (q, k, v), g)
            dq_ref, dkv_ref = torch.autograd.grad(out_ref, (q, k), g)
            dk_ref, dv_ref = dkv_ref.unbind(2)
            print(f"dQ max diff: {(dq - dq_ref).abs().max().item()}")
        out.backward(g)
        assert (out - out_ref).abs().max() <= 2 * err
        assert (dq - dq_ref).abs().max() <= 3 * err_dq
        for t in (dk, dv):
            check(t)
''')


def test_forward_only_removes_gradients_and_keeps_forward_checks():
    out = _runner().forward_only(SAMPLE)
    assert "autograd" not in out and "backward" not in out
    assert "dq_ref" not in out and "dk_ref" not in out and "dkv_ref" not in out
    # The forward assertion and the statements before it survive.
    assert "assert (out - out_ref).abs().max() <= 2 * err" in out
    assert "g = torch.randn_like(out)" in out
    # An emptied block becomes `pass`; a function that is not a test is untouched.
    assert "if big:\n        pass" in out
    assert "dq = x" in out
    # A loop over gradients goes with them.
    assert "check(t)" not in out
    compile(out, "sample", "exec")


def test_every_unimplemented_parameter_has_a_reason():
    ns = {}
    exec(_runner().CONFTEST, ns)
    why = ns["why_not"]
    run = {"d": 128, "causal": True, "dropout_p": 0.0, "softcap": 0.0, "alibi": False, "local": False}
    assert why("test_flash_attn_output", run) is None
    for change, word in [({"dropout_p": 0.17}, "dropout"), ({"softcap": 50.0}, "softcap"),
                         ({"alibi": True}, "alibi"), ({"local": True}, "window"),
                         ({"d": 96}, "head dim 96"), ({"deterministic": True}, "duplicate")]:
        reason = why("test_flash_attn_output", {**run, **change})
        assert reason is not None and word in reason, (change, reason)
    assert "rotary" in why("test_flash_attn_kvcache", {**run, "new_kv": True, "rotary_fraction": 0.5})
    assert why("test_flash_attn_kvcache", {**run, "new_kv": True, "rotary_fraction": 0.0,
                                           "num_splits": 0, "seqlen_new_eq_seqlen_q": False}) is None
    assert "block_table" in why("test_flash_attn_varlen_causal", {**run, "paged_kv_block_size": 256})
    assert why("test_flash_attn_kvcache", {**run, "paged_kv_block_size": 256, "num_splits": 0,
                                           "rotary_fraction": 0.0, "rotary_interleaved": False,
                                           "seqlen_new_eq_seqlen_q": True, "new_kv": False}) is None


def test_narrowing_counts_every_case_and_keeps_the_runnable_values():
    import ast

    r = _runner()
    ns = {}
    exec(r.CONFTEST, ns)
    tree = ast.parse(textwrap.dedent('''
        @pytest.mark.parametrize("dtype", ([torch.float16] if is_sm75 else [torch.float16, torch.bfloat16]))
        @pytest.mark.parametrize("d", [32, 64, 96, 128])
        @pytest.mark.parametrize("dropout_p", [0.0, 0.17])
        @pytest.mark.parametrize("seqlen_q,seqlen_k", [(1, 2), (3, 4)])
        def test_flash_attn_output(seqlen_q, seqlen_k, dropout_p, d, dtype):
            pass
    '''))
    report = r.narrow(tree, {"test_flash_attn_output"}, ns["why_not"])
    total, runnable, reasons = report["test_flash_attn_output"]
    assert (total, runnable) == (2 * 4 * 2 * 2, 2 * 2 * 1 * 2)
    assert sum(reasons.values()) == total - runnable
    text = ast.unparse(tree)
    assert "parametrize('d', [64, 128])" in text and "parametrize('dropout_p', [0.0])" in text
    assert "torch.bfloat16" in text  # an expression axis is left whole
