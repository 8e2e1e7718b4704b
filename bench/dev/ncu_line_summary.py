#!/usr/bin/env python3
"""ncu_line_summary.py CSV [TOP]: an Nsight Compute per-CUDA-source-line table (ncu -i REP --page source --csv
--print-source cuda; the library built with -lineinfo) summarized for a device log: the share of warp stall samples
per source line, the TOP lines with their text, and the samples by stall reason where the table has those columns."""
import csv, sys, collections

rows = list(csv.reader(open(sys.argv[1], newline="", errors="replace")))
top = int(sys.argv[2]) if len(sys.argv) > 2 else 45
hi = next(i for i, r in enumerate(rows) if "Source" in r)
head = rows[hi]
col = {c: i for i, c in enumerate(head)}
def find(*keys):
    for k in keys:
        for c, i in col.items():
            if k.lower() in c.lower():
                return i
    return None
isrc, iline = find("Source"), find("Line", "#")
iall = find("Warp Stall Sampling (All", "Stall Sampling (All", "Sampling Data (All")
iexe = find("Instructions Executed")
reasons = [(c, i) for c, i in col.items() if c.lower().startswith("stall_") or "stall " in c.lower() and "sampling" not in c.lower()]
def num(r, i):
    try:
        return float(r[i].replace(",", "")) if i is not None and i < len(r) and r[i] else 0.0
    except ValueError:
        return 0.0
body = [r for r in rows[hi + 1:] if len(r) == len(head)]
tot = sum(num(r, iall) for r in body) or 1.0
print(f"lines {len(body)}, stall samples {tot:.0f}, columns: {' | '.join(head)[:400]}")
byr = collections.Counter()
for r in body:
    for c, i in reasons:
        byr[c] += num(r, i)
if byr:
    print("by reason:", ", ".join(f"{c} {100 * v / tot:.1f}%" for c, v in byr.most_common(12)))
for r in sorted(body, key=lambda r: -num(r, iall))[:top]:
    s = r[isrc].strip()[:110]
    ln = r[iline] if iline is not None else "?"
    print(f"{100 * num(r, iall) / tot:5.1f}%  L{ln:>4}  exe {num(r, iexe):8.0f}  {s}")
