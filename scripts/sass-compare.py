#!/usr/bin/env python3
"""Compare the SASS of two folders of CUBINs written by `cargo run --release -p fp8-sdpa
--example cubins -- DIR ...` (before and after a refactor), instruction by instruction
without addresses, and their ptxas reports (resources.tsv).

Usage: scripts/sass-compare.py BEFORE_DIR AFTER_DIR [--nvdisasm PATH] [--diffs OUT_DIR]

Prints one line per CUBIN present in both folders (identical, or how many instructions
differ), the CUBINs only one folder has, and the resource rows that differ; exits 1 if any
SASS or resource row differs. nvdisasm comes from --nvdisasm, $NVDISASM or PATH (pip:
nvidia-cuda-nvdisasm). The CUBINs themselves differ whenever line numbers move (NVRTC
builds with --generate-line-info), so only the instructions are compared.
"""
import argparse, concurrent.futures, difflib, os, re, shutil, subprocess, sys

INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*$")


def sass(nvdisasm, path):
    out = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True, check=True).stdout
    lines = []
    for line in out.splitlines():
        m = INSN.search(line)
        if m:
            lines.append(m.group(1).rstrip(" ;"))
        elif line.strip().startswith(".L_x_"):
            lines.append(line.strip())
    return lines


def resources(folder):
    rows = {}
    path = os.path.join(folder, "resources.tsv")
    if os.path.exists(path):
        with open(path) as f:
            next(f)
            for line in f:
                p = line.rstrip("\n").split("\t")
                rows[(p[0], p[1])] = p[2:]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--nvdisasm", default=os.environ.get("NVDISASM") or shutil.which("nvdisasm"))
    ap.add_argument("--diffs", help="write a unified SASS diff per differing CUBIN here")
    a = ap.parse_args()
    if not a.nvdisasm:
        sys.exit("nvdisasm not found: pass --nvdisasm or set NVDISASM")
    b = {f for f in os.listdir(a.before) if f.endswith(".cubin")}
    c = {f for f in os.listdir(a.after) if f.endswith(".cubin")}
    both = sorted(b & c)

    def one(name):
        x = sass(a.nvdisasm, os.path.join(a.before, name))
        y = sass(a.nvdisasm, os.path.join(a.after, name))
        if x == y:
            return name, len(x), None
        diff = list(difflib.unified_diff(x, y, "before/" + name, "after/" + name, lineterm="", n=2))
        return name, len(x), diff

    same = differ = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        for name, n, diff in ex.map(one, both):
            if diff is None:
                same += 1
                print(f"same     {n:6d} insns  {name}")
            else:
                differ += 1
                changed = sum(1 for l in diff if l[:1] in "+-" and not l.startswith(("+++", "---")))
                print(f"DIFFERS  {n:6d} insns  {name}  ({changed} lines +/-)")
                if a.diffs:
                    os.makedirs(a.diffs, exist_ok=True)
                    with open(os.path.join(a.diffs, name + ".diff"), "w") as f:
                        f.write("\n".join(diff) + "\n")
    for name in sorted(b - c):
        print(f"only before: {name}")
    for name in sorted(c - b):
        print(f"only after:  {name}")
    rb, ra = resources(a.before), resources(a.after)
    res_diff = 0
    for k in sorted(rb.keys() & ra.keys()):
        if rb[k] != ra[k]:
            res_diff += 1
            print(f"RESOURCES {k[0]} {k[1]}: registers, spill, stack, smem {rb[k]} -> {ra[k]}")
    print(
        f"summary: {len(both)} cubins in both, {same} identical SASS, {differ} differ; "
        f"{len(b - c)} only before, {len(c - b)} only after; "
        f"{len(rb.keys() & ra.keys())} resource rows compared, {res_diff} differ"
    )
    sys.exit(1 if differ or res_diff else 0)


if __name__ == "__main__":
    main()
