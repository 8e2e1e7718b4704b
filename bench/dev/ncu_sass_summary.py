#!/usr/bin/env python3
"""ncu_sass_summary.py CSV [TOP]: summarize an Nsight Compute per-SASS source table (ncu -i REP --page source
--csv --print-source sass): executed instructions and stall samples per opcode, and the TOP instructions by
stall samples with their addresses (to find in the SASS listing). Given the per-CUDA-line table instead
(--print-source cuda, a library built with -lineinfo: no Address column), the TOP source lines by stall
samples with their text (in session 46 that view gave the fused kernels' lines no samples: --lines below is the
route that works). Prints compact text for a device log.

ncu_sass_summary.py CSV TOP --lines LISTING KERNEL: the per-SASS table joined with the kernel's line table, from
LISTING = `nvdisasm -g -c` of the object's cubin (`cuobjdump -xelf all X.o`, here: the device need not have the
tools) and KERNEL, a substring of its mangled name: the stall reasons over the kernel, then the TOP source lines
(file:line, inlined helpers by their own line) by executed instructions, with their stall samples."""
import csv, sys, collections

path = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
rows = list(csv.reader(open(path, newline="", errors="replace")))
hi = next(i for i, r in enumerate(rows) if any("Source" == c or c.startswith("Address") for c in r))
head = rows[hi]
print("columns:", " | ".join(head)[:600])
col = {c: i for i, c in enumerate(head)}
def find(*keys):
    for k in keys:
        for c, i in col.items():
            if k.lower() in c.lower():
                return i
    return None
isrc = find("Source")
iexe = find("Instructions Executed")
istall = find("Warp Stall Sampling (All", "Stall Sampling (All", "Sampling Data (All")
inot = find("Warp Stall Sampling (Not-issued", "Not-Issued")
iaddr = find("Address")
def num(r, i):
    try:
        return float(r[i].replace(",", "")) if i is not None and i < len(r) and r[i] else 0.0
    except ValueError:
        return 0.0
ops = collections.defaultdict(lambda: [0.0, 0.0, 0])
body = [r for r in rows[hi + 1:] if isrc is not None and isrc < len(r)]
tot_e = sum(num(r, iexe) for r in body) or 1
tot_s = sum(num(r, istall) for r in body) or 1
if "--lines" in sys.argv:  # the join with the line table
    import re
    listing, kern = sys.argv[sys.argv.index("--lines") + 1:][:2]
    at, cur, inside = {}, None, False
    for l in open(listing, errors="replace"):
        if l.startswith("//--------------------- .text."):
            inside = kern in l
        elif inside:
            g = re.search(r'## File "([^"]+)", line (\d+)', l)
            if g:
                cur = f"{g.group(1).split('/')[-1]}:{g.group(2)}"
            elif (g := re.match(r"\s+/\*([0-9a-f]{4,})\*/", l)):
                at[int(g.group(1), 16)] = cur
    base = int(body[0][iaddr], 16)
    reasons = [c for c in head if c.startswith("stall_") and "Not Issued" not in c]
    rs = {c: sum(num(r, col[c]) for r in body) for c in reasons}
    ts = sum(rs.values()) or 1
    print("stall reasons:", ", ".join(f"{c[6:]} {100*v/ts:.1f}%" for c, v in sorted(rs.items(), key=lambda kv: -kv[1])[:10]))
    ex, st = collections.Counter(), collections.Counter()
    for r in body:
        k = at.get(int(r[iaddr], 16) - base, "?")
        ex[k] += num(r, iexe); st[k] += num(r, istall)
    print(f"top {top} source lines by executed warp instructions (executed %, stall samples %, line):")
    for k, v in ex.most_common(top):
        print(f"  {100*v/tot_e:5.1f}% {100*st[k]/tot_s:5.1f}%  {k}")
    sys.exit(0)
if iaddr is None:  # the per-line table
    iline = find("Line", "#")
    print(f"{len(body)} source lines, {tot_s:.0f} stall samples; top {top} (samples %, executed, line, text):")
    for r in sorted(body, key=lambda r: -num(r, istall))[:top]:
        ln = r[iline] if iline is not None and iline < len(r) else "?"
        print(f"  {100*num(r, istall)/tot_s:5.2f}% {num(r, iexe):10.0f}  L{ln:>5}  {r[isrc].strip()[:100]}")
    sys.exit(0)
for r in body:
    w = r[isrc].split() or ["?"]
    op = (w[1] if w[0].startswith("@") and len(w) > 1 else w[0]).split(".")[0]
    ops[op][0] += num(r, iexe); ops[op][1] += num(r, istall); ops[op][2] += 1
print(f"{len(body)} SASS rows, {tot_e:.0f} warp instructions executed, {tot_s:.0f} stall samples")
print("opcode        exec%  stall%  static")
for op, (e, s, n) in sorted(ops.items(), key=lambda kv: -kv[1][1])[:30]:
    print(f"{op:12s} {100*e/tot_e:6.1f} {100*s/tot_s:6.1f} {n:7d}")
print(f"top {top} instructions by stall samples (address, samples %, executed, text):")
idx = sorted(range(len(body)), key=lambda k: -num(body[k], istall))[:top]
for k in sorted(idx):
    r = body[k]
    print(f"  {r[iaddr] if iaddr is not None else k:>8} {100*num(r, istall)/tot_s:5.2f}% {num(r, iexe):10.0f}  {r[isrc].strip()[:90]}")
