"""Round 16, run 87: per-warp step costs of the paired D128 tile from the WT lines of
run87-warp-trace.tgz (r/b.log). A WT line: causal, m-block, tile j, samples, then per warp
the mean DONE wait and the mean step (clock64 cycles, from stamp sums). Prints each causal
m-block's last 8 tiles (its diagonal) in units of the non-causal run's mean full step, and
each warp's sum over the diagonal. Run: python3 warp_trace.py r/b.log"""
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith('WT')]
D = {}
for r in rows:
    c, mb, j = int(r[1]), int(r[2]), int(r[3])
    v = list(map(int, r[5:]))
    D[(c, mb, j)] = (v[0::2], v[1::2])
full = [sum(D[(0, mb, j)][1]) / 8 for mb in range(4) for j in range(2, 30)]
base = sum(full) / len(full)
print(f"non-causal mean full step: {base:.0f} cycles")
for mb in range(4):
    n = 8 * (mb + 1)
    tot = [0.0] * 8
    print(f"causal m-block {mb}: tiles {n}")
    for j in range(n - 8, n):
        wait, step = D[(1, mb, j)]
        tot = [a + b / base for a, b in zip(tot, step)]
        print(f"  j{j:2d} step " + ' '.join(f"{x / base:4.2f}" for x in step)
              + " | wait " + ' '.join(f"{x / base:4.2f}" for x in wait))
    print("  diagonal sum per warp " + ' '.join(f"{x:4.2f}" for x in tot))
