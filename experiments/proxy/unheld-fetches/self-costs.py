# Self cost per function from a callgrind output file, divided by a request count:
#   python3 self-costs.py CALLGRIND_OUT REQUESTS [ROWS]
# (callgrind_annotate attributed everything to __libc_start_main for these LTO builds.)
import sys,re,collections
def parse(path):
    names={}; self_=collections.Counter()
    fn=None; aftercall=False
    for line in open(path):
        line=line.rstrip("\n")
        m=re.match(r'^(c?fn)=\((\d+)\)(?: (.*))?$',line)
        if m:
            kind,i,n=m.groups()
            if n: names[i]=n
            if kind=="fn": fn=i
            continue
        if line.startswith("calls="): aftercall=True; continue
        if line and (line[0].isdigit() or line[0] in "+-*"):
            parts=line.split()
            if len(parts)>=2 and fn:
                v=int(parts[1])
                if aftercall: aftercall=False
                else: self_[fn]+=v
            continue
    return {names.get(k,k):v for k,v in self_.items()}
a=parse(sys.argv[1]); n=int(sys.argv[2]) if len(sys.argv)>2 else 1
tot=sum(a.values())
for k,v in sorted(a.items(),key=lambda x:-x[1])[:int(sys.argv[3]) if len(sys.argv)>3 else 40]:
    print(f"{v/n:10.0f} {100*v/tot:5.1f}% {k[:150]}")
print("total",tot/n)
