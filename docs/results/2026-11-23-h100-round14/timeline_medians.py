import collections
cfg = {'f16_128':(128,64,2),'kv8p_128':(256,32,1),'kv8m_128':(128,32,2),
       'f16_64':(128,128,2),'kv8m_64':(128,64,2),'kv8t_64':(256,128,1)}
S=1024
def med(x): x=sorted(x); return x[len(x)//2]
for name,(BM,BN,bps) in cfg.items():
    rows=[l.split() for l in open(f'./tl_{name}.txt')]
    mb=S//BM
    out=[]
    for causal in (0,1):
        R=[r for r in rows if int(r[1])==causal]
        d=collections.defaultdict(list)
        for r in R:
            bx,bz=int(r[3]),int(r[5])
            m = (mb-1-(bz%mb)) if causal else bx
            d[m].append((int(r[7])-int(r[6]))/1e3)
        out.append(' '.join(f"{med(d[m]):5.1f}" for m in range(mb)))
    print(f"{name:9s} full: {out[0]}\n{'':9s} causal: {out[1]}")
