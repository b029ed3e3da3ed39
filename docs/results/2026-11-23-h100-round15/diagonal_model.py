"""Round 15: a model of the 256-row paired tile's causal diagonal (docs/perf-notes.md).

8 warps x 2 fragments of 16 rows (paired: warp w owns w and 15 - w), 8 diagonal steps of 32
keys. A step costs a warp 1 with two active fragments, c1 with one, 0 with none; `fuse` runs
two successive one-fragment steps as one (cost cf). A warp may start step k only when every
warp has finished step k - L - 1 (decoupled sync: L = 1). `pre` full steps precede the
diagonal. Prints the diagonal's makespan in full steps for orders and costs. Run: python3
diagonal_model.py (the exhaustive order search takes a minute).
"""
import itertools
def act(f,j,step=32): return 1 if 16*f+15>=step*j else 0
def mk(assign, order, L=1, c1=0.65, cf=1.0, fuse=True, pre=0, verbose=False):
    # pre: number of full steps before the diagonal (all warps 2 frags)
    W=len(assign); seq=[None]*pre+list(order); n=len(seq)
    fin=[[None]*n for _ in range(W)]
    # each warp: plan of groups
    plans=[]
    for w in range(W):
        a=[2 if j is None else sum(act(f,j) for f in assign[w]) for j in seq]
        groups=[]; k=0
        while k<n:
            if fuse and a[k]==1 and k+1<n and a[k+1]==1:
                groups.append((k,k+1,cf)); k+=2
            else:
                groups.append((k,k,[0,c1,1][a[k]])); k+=1
        plans.append(groups)
    # event simulation: process in rounds until all done
    t=[0.0]*W; gi=[0]*W
    done=0
    while any(gi[w]<len(plans[w]) for w in range(W)):
        progressed=False
        for w in range(W):
            while gi[w]<len(plans[w]):
                k0,k1,c=plans[w][gi[w]]
                need=k1-L-1  # all warps finished step need
                if need>=0 and any(fin[x][need] is None for x in range(W)): break
                gate=max(fin[x][need] for x in range(W)) if need>=0 else 0.0
                s=max(t[w],gate); t[w]=s+c
                for k in range(k0,k1+1): fin[w][k]=t[w]
                gi[w]+=1; progressed=True
        assert progressed
    return max(t)-pre
paired=[(w,15-w) for w in range(8)]
fw=list(range(8))
for c1 in (0.5,0.65):
    print(c1,'fwd nofuse',mk(paired,fw,c1=c1,fuse=False,pre=4),'fwd fuse',mk(paired,fw,c1=c1,pre=4),
          'rev fuse', mk(paired,fw[::-1],c1=c1,pre=4))
    best=min((mk(paired,list(o),c1=c1,pre=4),o) for o in itertools.permutations(range(8)))
    print('  best fuse',best, 'best nofuse', min((mk(paired,list(o),c1=c1,fuse=False,pre=4),o) for o in itertools.permutations(range(8))))
print('---')
orders={'fwd':list(range(8)),'zig0':[0,7,1,6,2,5,3,4],'best':[0,1,7,2,6,3,4,5],'zig1':[0,1,7,2,6,3,5,4],'bestnf':[0,1,4,5,3,6,2,7]}
for c1 in (0.5,0.6,0.7,0.8):
  for cf in (0.9,1.0,1.1):
    print(c1,cf,{k:round(mk(paired,o,c1=c1,cf=cf,pre=4),2) for k,o in orders.items()}, 'nofuse', {k:round(mk(paired,o,c1=c1,fuse=False,pre=4),2) for k,o in orders.items()})
