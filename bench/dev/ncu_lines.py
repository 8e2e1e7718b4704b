"""Where a kernel's warps stall, by source line, from an Nsight Compute report (`ncu --set full -o x`), without the
Nsight tools: the report's per-PC samples (smsp__pcsamp_*) and instruction counts mapped through the cubin's line
table (-lineinfo) to file:line. For this machine, which has no ncu; a device call only has to write the report.
    python3 bench/dev/ncu_lines.py x.ncu-rep [kernel-name-substring] [top-lines]
Needs pyelftools (`pip install pyelftools`). The report format is Nsight's own (protobuf records, each after a 4-byte
length; read here by field numbers seen in ncu 2025 reports), so this may need mending for another ncu version.
A stall sample names the instruction the warp waits to issue: a barrier's wait shows at the instruction after it."""
import bisect
import io
import struct
import sys
from collections import defaultdict

from elftools.elf.elffile import ELFFile


def varint(b, i, signed=False):
    """LEB128 at b[i] (protobuf's varints and DWARF's unsigned ones; signed: DWARF's SLEB128), and the next index"""
    r = s = 0
    while True:
        x = b[i]
        i += 1
        r |= (x & 0x7F) << s
        s += 7
        if x < 128:
            return (r - (1 << s) if signed and x & 0x40 else r), i


def fields(b):
    """a protobuf message as [(field, wire type, value)] (no schema)"""
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        elif w == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % w)
        out.append((f, w, v))
    return out


def get(fl, f):
    """the values of field f in a parsed message"""
    return [v for ff, _, v in fl if ff == f]


def records(path):
    d = open(path, "rb").read()
    assert d[:4] == b"NVR\0", "not an Nsight Compute report"
    i, out = 4, []
    while i + 4 <= len(d):
        n = struct.unpack("<I", d[i:i + 4])[0]
        out.append(d[i + 4:i + 4 + n])
        i += 4 + n
    return out


def line_table(elf):
    """{function symbol: [(address, file, line)]} from .debug_line (DWARF 2 line programs; each sequence's
    DW_LNE_set_address is relocated against its function's .text section)"""
    e = ELFFile(io.BytesIO(elf))
    data = e.get_section_by_name(".debug_line").data()
    symtab = e.get_section_by_name(".symtab")
    relsym = {r["r_offset"]: symtab.get_symbol(r["r_info_sym"]).name
              for r in e.get_section_by_name(".rela.debug_line").iter_relocations()}
    out, i = defaultdict(list), 0
    while i < len(data):
        end = i + 4 + struct.unpack("<I", data[i:i + 4])[0]
        hl = struct.unpack("<I", data[i + 6:i + 10])[0]
        j = i + 10
        min_inst, line_range, opbase = data[j], data[j + 3], data[j + 4]
        line_base = struct.unpack("b", data[j + 2:j + 3])[0]
        std_len = list(data[j + 5:j + 4 + opbase])
        j += 4 + opbase
        while data[j]:  # include directories
            j = data.index(b"\0", j) + 1
        j += 1
        files = [None]
        while data[j]:
            k = data.index(b"\0", j)
            files.append(data[j:k].decode())
            j = k + 1
            for _ in range(3):
                _, j = varint(data, j)
        j = i + 10 + hl
        addr, file, line, func = 0, 1, 1, None
        while j < end:
            op = data[j]
            j += 1
            if op >= opbase:
                a = op - opbase
                addr += a // line_range * min_inst
                line += line_base + a % line_range
                out[func].append((addr, files[file], line))
            elif op == 0:
                n, j = varint(data, j)
                if data[j] == 1:
                    addr, file, line = 0, 1, 1
                elif data[j] == 2:
                    func = relsym.get(j + 1, func)
                    addr = int.from_bytes(data[j + 1:j + n], "little")
                j += n
            elif op == 1:
                out[func].append((addr, files[file], line))
            elif op == 2:
                a, j = varint(data, j)
                addr += a * min_inst
            elif op == 3:
                a, j = varint(data, j, signed=True)
                line += a
            elif op == 4:
                file, j = varint(data, j)
            elif op == 5:
                _, j = varint(data, j)
            elif op == 8:
                addr += (255 - opbase) // line_range * min_inst
            elif op == 9:
                addr += struct.unpack("<H", data[j:j + 2])[0]
                j += 2
            elif op not in (6, 7):
                for _ in range(std_len[op - 1]):
                    _, j = varint(data, j)
        i = end
    return out


def main():
    path = sys.argv[1]
    want = sys.argv[2] if len(sys.argv) > 2 else ""
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    recs = records(path)
    names = []  # the metric names, which the results index
    modules = {}  # function address → (line table rows of that function)
    parsed = []  # each record's fields, parsed once
    for r in recs:
        try:
            parsed.append(fields(r))
        except (ValueError, IndexError):
            pass
    for f in parsed:
        tags = {ff for ff, _, _ in f}
        if 4 in tags and not names:
            try:
                strs = [v.decode() for v in get(fields(get(f, 4)[0]), 1)]
                if strs and strs[0].startswith("launch__"):
                    names = strs
                    continue
            except (ValueError, IndexError, UnicodeDecodeError):
                pass
        elf = [v for ff, w, v in f if ff == 4 and w == 2 and v[:4] == b"\x7fELF"]
        if elf and 9 in tags:
            fn = fields(get(fields(get(f, 9)[0]), 1)[0])  # (1: symbol, 2: address)
            sym, base = fn[0][2].decode(), fn[1][2]
            rows = sorted(line_table(elf[0]).get(sym, []))
            modules[base] = (sym, rows)
    for f in parsed:
        mangled = [v for ff, w, v in f if ff == 5 and w == 2]
        shown = [v for ff, w, v in f if ff == 7 and w == 2]
        if not mangled or not shown or want not in shown[0].decode(errors="replace"):
            continue
        per = defaultdict(lambda: defaultdict(float))  # metric → file:line → value
        base = rows = None
        for e in get(f, 13):
            ef = fields(e)
            if ef[0][0] != 1 or ef[0][2] >= len(names):
                continue
            nm = names[ef[0][2]]
            if not (nm.startswith("smsp__pcsamp") or nm == "inst_executed"):
                continue
            for ff, _, v in ef:
                if ff != 3:
                    continue
                pc_v = fields(v)
                addr = fields(pc_v[0][2])[0][2]
                val = fields(pc_v[1][2])[0]
                val = val[2] if val[1] == 0 else struct.unpack("<d", val[2])[0]
                if base is None:  # the module whose function holds these PCs
                    base = max((b for b in modules if b <= addr), default=None)
                    rows = modules[base][1] if base is not None else []
                    addrs = [a for a, _, _ in rows]
                k = bisect.bisect_right(addrs, addr - base) - 1
                per[nm]["%s:%d" % rows[k][1:] if k >= 0 else "?"] += val
        samples = per["smsp__pcsamp_sample_count"]
        total = sum(samples.values()) or 1
        stalls = {k[len("smsp__pcsamp_warps_issue_stalled_"):]: v for k, v in per.items()
                  if k.startswith("smsp__pcsamp_warps_issue_stalled_") and not k.endswith("_not_issued")}
        print("%s: %d samples" % (shown[0].decode()[:110], total))
        print("  stalls: " + ", ".join("%s %.1f%%" % (k, 100 * sum(v.values()) / total)
                                      for k, v in sorted(stalls.items(), key=lambda x: -sum(x[1].values()))[:10]))
        inst = per["inst_executed"]
        ti = sum(inst.values()) or 1
        for line, v in sorted(samples.items(), key=lambda x: -x[1])[:top]:
            why = sorted(((s[line], k) for k, s in stalls.items()), reverse=True)[:3]
            why = ", ".join("%s %.0f%%" % (k, 100 * x / v) for x, k in why)
            print("  %5.1f%% samples %5.1f%% inst  %-28s %s" % (100 * v / total, 100 * inst[line] / ti, line, why))


if __name__ == "__main__":
    main()
