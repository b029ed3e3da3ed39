"""Runs FlashAttention's own forward tests against fp8_sdpa.

    python python/fa_compat/run_fa_tests.py PATH/TO/flash-attention/tests/test_flash_attn.py

FlashAttention's ``tests/test_flash_attn.py`` checks each output against a float32 reference
with its criterion: the error at most twice PyTorch's own error in the input dtype. This
runner makes a forward-only copy of that file (every statement that computes or reads a
gradient is removed: fp8_sdpa has no backward pass; the forward assertions are untouched),
puts the ``flash_attn`` shim beside it (FlashAttention 2's argument order over fp8_sdpa), and
deselects the parameters fp8_sdpa does not implement, counting them by reason. It prints a
table: per test, the cases run, passed and failed, and what was not run and why.

Nothing from FlashAttention is stored in this repository: the test file is read from the
path given (a checkout of https://github.com/Dao-AILab/flash-attention).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The tests of the forward pass: output, causal, varlen, kvcache and their packed forms.
TESTS = (
    "test_flash_attn_qkvpacked",
    "test_flash_attn_varlen_qkvpacked",
    "test_flash_attn_output",
    "test_flash_attn_varlen_output",
    "test_flash_attn_causal",
    "test_flash_attn_varlen_causal",
    "test_flash_attn_splitkv",
    "test_flash_attn_kvcache",
)

GRAD_CALLS = ("torch.autograd.grad", ".backward")


def _mentions(node: ast.AST, names: set[str]) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in names:
            return True
        if isinstance(n, ast.Call):
            text = ast.unparse(n.func)
            if text == GRAD_CALLS[0] or text.endswith(GRAD_CALLS[1]):
                return True
    return False


def _targets(node: ast.AST) -> set[str]:
    out = set()
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                out.add(n.id)
    return out


def _header(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of a compound statement outside its bodies (an if's test, a loop's target
    and iterable, a with's items)."""
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, ast.For):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, ast.With):
        return list(stmt.items)
    return [stmt]


def _strip(body: list[ast.stmt], grads: set[str]) -> list[ast.stmt]:
    kept = []
    for stmt in body:
        if any(_mentions(part, grads) for part in _header(stmt)):
            continue
        for field in ("body", "orelse"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, field, _strip(inner, grads) or ([ast.Pass()] if field == "body" else []))
        kept.append(stmt)
    return kept


class _Dtype(str):
    """Stands in for a torch dtype while counting cases (no torch needed)."""


_COUNT_NS = {
    "torch": type("torch", (), {"float16": _Dtype("float16"), "bfloat16": _Dtype("bfloat16")}),
    "is_sm75": False,
    "is_sm8x": False,
    "is_sm80": False,
    "is_sm90": True,
}


def _axes(fn: ast.FunctionDef):
    """The parametrize decorators of a test: (decorator, names, values), values evaluated."""
    out = []
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("parametrize"):
            names = [n.strip() for n in ast.literal_eval(d.args[0]).split(",")]
            values = eval(compile(ast.Expression(d.args[1]), "<axis>", "eval"), dict(_COUNT_NS))
            out.append((d, names, list(values)))
    return out


def narrow(tree: ast.Module, tests, why_not):
    """Counts each selected test's cases that the library cannot run, by reason, and drops
    from its parametrize lists every value no runnable case uses (so pytest does not generate
    the rest; the conftest deselects what the cross product still adds). Returns
    {test: (cases, runnable, {reason: cases})}."""
    import collections
    import itertools

    report = {}
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name in tests):
            continue
        axes = _axes(fn)
        used = [set() for _ in axes]
        reasons = collections.Counter()
        total = 0
        for combo in itertools.product(*(range(len(v)) for _, _, v in axes)):
            params = {}
            for (_, names, values), i in zip(axes, combo):
                params.update(dict(zip(names, values[i])) if len(names) > 1 else {names[0]: values[i]})
            total += 1
            reason = why_not(fn.name, params)
            if reason is None:
                for u, i in zip(used, combo):
                    u.add(i)
            else:
                reasons[reason] += 1
        for (d, _, values), u in zip(axes, used):
            if isinstance(d.args[1], (ast.List, ast.Tuple)) and len(u) < len(values):
                d.args[1] = ast.List(elts=[e for i, e in enumerate(d.args[1].elts) if i in u], ctx=ast.Load())
        report[fn.name] = (total, total - sum(reasons.values()), dict(reasons))
    return report


def forward_only(source: str) -> str:
    """``source`` with every statement that computes or reads a gradient removed from each
    test function. Gradient names are the targets of assignments whose value calls
    ``torch.autograd.grad`` (or ``.backward``), and, to a fixpoint, of assignments whose
    value reads such a name."""
    tree = ast.parse(source)
    for fn in tree.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")):
            continue
        grads: set[str] = set()
        assigns = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
        while True:
            before = len(grads)
            for a in assigns:
                if a.value is not None and _mentions(a.value, grads):
                    grads |= _targets(a)
            if len(grads) == before:
                break
        fn.body = _strip(fn.body, grads)
    return ast.unparse(tree)


CONFTEST = r'''

SUPPORTED_D = (64, 128, 256)

def why_not(name, p):
    """Why fp8_sdpa cannot run this parameter set (None: it runs)."""
    if p.get("dropout_p", 0.0) > 0.0:
        return "dropout_p > 0: no dropout (inference forward pass only)"
    if p.get("softcap", 0.0) > 0.0:
        return "softcap > 0: not implemented (issue 48)"
    if p.get("alibi"):
        return "alibi_slopes: not implemented (issue 48)"
    if p.get("local"):
        return "window_size (local attention): not implemented (issue 48)"
    if "d" in p and p["d"] not in SUPPORTED_D:
        return "head dim %d: fp8_sdpa serves 64, 128, 256 (issue 48)" % p["d"]
    if p.get("new_kv") and p.get("rotary_fraction", 0.0) > 0.0:
        return "rotary embedding of appended k/v: not implemented"
    if p.get("has_leftpad"):
        return "cache_leftpad: not implemented"
    if name.startswith("test_flash_attn_varlen") and p.get("paged_kv_block_size"):
        return "block_table in flash_attn_varlen_func: paged K/V only through flash_attn_with_kvcache"
    # Parameters fp8_sdpa ignores, or that only matter with a deselected one: each such case
    # repeats a selected case's computation exactly.
    if p.get("deterministic"):
        return "duplicate: deterministic=True (the forward pass is deterministic either way)"
    if name == "test_flash_attn_kvcache":
        if p.get("num_splits") == 1:
            return "duplicate: num_splits=1 (ignored: the library picks its split)"
        if p.get("rotary_fraction", 0.0) > 0.0:
            return "rotary: only with appended k/v (the test itself skips it otherwise)"
        if p.get("rotary_interleaved"):
            return "duplicate: rotary_interleaved only matters with rotary"
        if not p.get("new_kv") and not p.get("seqlen_new_eq_seqlen_q", True):
            return "duplicate: seqlen_new_eq_seqlen_q only matters with appended k/v"
    return None

def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (keep if why_not(item.originalname or item.name, params) is None else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fa_tests", type=Path, help="flash-attention's tests/test_flash_attn.py")
    ap.add_argument("--tests", nargs="*", default=list(TESTS), help="test functions to run")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write the forward-only copy")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest after --")
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="fa_compat_"))
    work.mkdir(parents=True, exist_ok=True)
    ns: dict = {}
    exec(CONFTEST, ns)
    tree = ast.parse(forward_only(a.fa_tests.read_text()))
    report = narrow(tree, set(a.tests), ns["why_not"])
    target = work / "test_flash_attn_fwd.py"
    target.write_text(ast.unparse(tree))
    (work / "conftest.py").write_text(CONFTEST)
    junit = work / "junit.xml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
           *(f"{target}::{t}" for t in a.tests), *a.pytest_args]
    rc = subprocess.call(cmd, cwd=work, env=env)
    summarize(junit, report, a.tests)
    return rc


def summarize(junit: Path, report, tests) -> None:
    import xml.etree.ElementTree as ET

    ran: dict[str, list[int]] = {t: [0, 0, 0] for t in tests}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = re.sub(r"\[.*", "", case.get("name", ""))
            if name not in ran:
                continue
            r = ran[name]
            failed = case.find("failure") is not None or case.find("error") is not None
            skipped = case.find("skipped") is not None
            r[0] += not skipped
            r[1] += not failed and not skipped
            r[2] += failed
    print("\n| FlashAttention test | cases | runnable here | run | passed | failed |\n|---|---|---|---|---|---|")
    for t, (n, p, f) in ran.items():
        total, runnable, _ = report.get(t, (0, 0, {}))
        print(f"| {t} | {total} | {runnable} | {n} | {p} | {f} |")
    import collections

    by_reason = collections.Counter()
    for _, _, reasons in report.values():
        by_reason.update(reasons)
    print("\n| not run (first reason that applies) | cases |\n|---|---|")
    for reason, count in by_reason.most_common():
        print(f"| {reason} | {count} |")


if __name__ == "__main__":
    sys.exit(main())
