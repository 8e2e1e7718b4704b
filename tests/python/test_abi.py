"""The ctypes binding (python/rewy/_lib.py) against rewy.h as the C compiler lays it out.

The header is the one source of the ABI. This test reads its structs and enums, compiles a small C
program that prints offsetof, sizeof and a type kind of every field of rewy_config, rewy_fwd_params
and rewy_bwd_params and the value of every enumerator, and compares them with _lib.py's Structures
(same fields in the same order, same offsets, sizes and kinds) and constants (REWY_X -> X). A field
added to the header, moved, or retyped makes it fail until _lib.py follows.
"""
import ctypes
import os
import re
import shutil
import subprocess

import pytest

from rewy import _lib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
HEADER = os.path.join(REPO, "include", "rewy.h")
STRUCTS = {"rewy_config": _lib.Config, "rewy_fwd_params": _lib.FwdParams, "rewy_bwd_params": _lib.BwdParams}
# enumerators that are no value a caller passes or receives
NOT_BOUND = {"REWY_STATUS_COUNT"}


def parse_header(text):
    """({struct: [field, ...]}, [enumerator, ...]) of rewy.h's typedef'd structs and enums."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)
    structs = {}
    for name, body in re.findall(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*\1\s*;", text, re.S):
        fields = []
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            # "const void *q, *k, *v" -> q, k, v: the last identifier of each declarator
            fields += [re.findall(r"\w+", re.sub(r"\[.*?\]", "", d))[-1] for d in decl.split(",")]
        structs[name] = fields
    enums = [e for body in re.findall(r"typedef\s+enum\s+\w+\s*\{(.*?)\}", text, re.S)
             for e in re.findall(r"\b(REWY_\w+)\b", body)]
    return structs, enums


# the kind of a field as C's _Generic sees it (enums are unsigned or int: both "i")
C_KINDS = """
#define KIND(x) _Generic((x), float: 'f', double: 'd', int: 'i', unsigned: 'i', long: 'l', \\
                         unsigned long: 'z', rewy_config: 's', default: 'p')
"""
CTYPES_KINDS = {ctypes.c_float: "f", ctypes.c_double: "d", ctypes.c_int: "i", ctypes.c_uint: "i",
                ctypes.c_long: "l", ctypes.c_ulong: "z", ctypes.c_void_p: "p", ctypes.c_char_p: "p"}


def c_layout(include_dir, tmp_path):
    """What the C compiler says: {(struct, field): (offset, size, kind)}, {struct: sizeof},
    {enumerator: value}, for the rewy.h in include_dir."""
    structs, enums = parse_header(open(os.path.join(include_dir, "rewy.h")).read())
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"rewy.h\"", C_KINDS, "int main(void) {"]
    for s in STRUCTS:
        lines.append('    printf("S %s %%zu\\n", sizeof(%s));' % (s, s))
        for f in structs[s]:
            lines.append('    printf("F %s %s %%zu %%zu %%c\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s), '
                         'KIND(((%s *)0)->%s));' % (s, f, s, f, s, f, s, f))
    for e in enums:
        lines.append('    printf("E %s %%lld\\n", (long long)%s);' % (e, e))
    lines += ["    return 0;", "}"]
    src, exe = tmp_path / "abi.c", tmp_path / "abi"
    src.write_text("\n".join(lines) + "\n")
    cc = os.environ.get("CC", "cc")
    assert shutil.which(cc), "the ABI test needs a C compiler (%s)" % cc
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", include_dir, str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    fields, sizes, values = {}, {}, {}
    for line in out.splitlines():
        tag, *rest = line.split()
        if tag == "S":
            sizes[rest[0]] = int(rest[1])
        elif tag == "F":
            fields[(rest[0], rest[1])] = (int(rest[2]), int(rest[3]), rest[4])
        else:
            values[rest[0]] = int(rest[1])
    return structs, fields, sizes, values


def ctypes_kind(t):
    if isinstance(t, type) and issubclass(t, ctypes.Structure):
        return "s"
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):
        return "p"
    return CTYPES_KINDS.get(t, "?")


def mismatches(include_dir, tmp_path):
    """Every difference between the header (as compiled) and _lib.py, as readable lines."""
    structs, fields, sizes, values = c_layout(include_dir, tmp_path)
    bad = []
    for s, cls in STRUCTS.items():
        names = [n for n, _ in cls._fields_]
        if names != structs[s]:
            bad.append("%s fields: header %s, _lib.%s %s" % (s, structs[s], cls.__name__, names))
        for n, t in cls._fields_:
            if (s, n) not in fields:
                continue
            d = getattr(cls, n)
            py = (d.offset, d.size, ctypes_kind(t))
            if py != fields[(s, n)]:
                bad.append("%s.%s: C (offset, size, kind) %s, ctypes %s" % (s, n, fields[(s, n)], py))
        if ctypes.sizeof(cls) != sizes[s]:
            bad.append("sizeof(%s): C %d, ctypes %d" % (s, sizes[s], ctypes.sizeof(cls)))
    for e, v in values.items():
        if e in NOT_BOUND:
            continue
        py = getattr(_lib, e[len("REWY_"):], None)
        if py != v:
            bad.append("%s = %d in rewy.h, _lib.%s = %s" % (e, v, e[len("REWY_"):], py))
    return bad


def test_ctypes_matches_header(tmp_path):
    bad = mismatches(os.path.join(REPO, "include"), tmp_path)
    assert not bad, "python/rewy/_lib.py differs from include/rewy.h:\n" + "\n".join(bad)


def test_header_parse_sees_every_field(tmp_path):
    """The parser must find the fields the C compiler has (guards the comparison above from
    comparing too little): the last field of each struct ends where sizeof says, up to padding."""
    structs, fields, sizes, values = c_layout(os.path.join(REPO, "include"), tmp_path)
    for s in STRUCTS:
        off, size, _ = fields[(s, structs[s][-1])]
        assert sizes[s] - 8 < off + size <= sizes[s], s
        assert len(structs[s]) >= {"rewy_config": 18, "rewy_fwd_params": 15, "rewy_bwd_params": 23}[s], s
    assert values["REWY_OK"] == 0 and values["REWY_BF16"] == 1 and values["REWY_OP_GDN2"] == 3


@pytest.mark.parametrize("edit", ["move", "retype", "add", "enum"])
def test_detects_header_changes(tmp_path, edit):
    """The comparison fails on a copy of rewy.h with a field moved, retyped or added, or an
    enumerator renumbered."""
    text = open(HEADER).read()
    old, new = {
        "move": ("    float scale;", None),       # scale moved to the end of rewy_config
        "retype": ("    int num_seqs;", "    long num_seqs;"),
        "add": ("    size_t saved_bytes;\n} rewy_fwd_params;", "    size_t saved_bytes;\n    int extra;\n} rewy_fwd_params;"),
        "enum": ("REWY_OP_GDN2 = 3", "REWY_OP_GDN2 = 4"),
    }[edit]
    assert text.count(old) == 1, old
    if edit == "move":
        line = text[text.index(old):text.index("\n", text.index(old)) + 1]
        text = text.replace(line, "")
        text = text.replace("} rewy_config;", line + "} rewy_config;")
    else:
        text = text.replace(old, new)
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "rewy.h").write_text(text)
    assert mismatches(str(inc), tmp_path), "the ABI comparison missed a %s" % edit
