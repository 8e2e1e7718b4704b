#!/usr/bin/env python3
"""ptx_loop_count.py: static instruction counts of a kernel's outermost loop (its chunk loop), from PTX, for rewy's
kernels and for FLA's Triton fwd_h. No GPU needed (session 22, docs/PERF.md "What the table says").

  python3 bench/dev/ptx_loop_count.py rewy src/cuda/chain_scan.cu chain_pair_kernelILi128ELi128ELi128E
      (nvcc -ptx for sm_90a; the pattern picks the entry whose mangled name contains it)
  python3 bench/dev/ptx_loop_count.py fla .ref/fla-src [BV NUM_WARPS NUM_STAGES]
      (FLA's chunk_gated_delta_rule_fwd_kernel_h_blockdim64, compiled by the installed Triton for sm_90,
       K = V = 128, chunk 64, h0 and ht, v_new saved, no gate; FLA's source is read, not imported)

Prints the loop's PTX instruction count and the most frequent opcodes. PTX is before ptxas: counts indicate, the
executed SASS counts (ncu's source counters, bench/dev/s23_profile.sh) decide."""
import os, re, subprocess, sys, tempfile


def loop_counts(ptx_lines):
    """(instructions, opcode counts) of the longest backward-branch loop"""
    labels = {}
    for i, l in enumerate(ptx_lines):
        m = re.match(r'^(\$L__\w+):', l)
        if m:
            labels[m.group(1)] = i
    loops = []
    for i, l in enumerate(ptx_lines):
        m = re.search(r'bra(?:\.uni)?\s+(\$L__\w+);', l)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append((labels[m.group(1)], i))
    if not loops:
        return 0, {}
    a, b = max(loops, key=lambda x: x[1] - x[0])
    cnt = {}
    n = 0
    for s in ptx_lines[a:b + 1]:
        s = s.strip()
        if not s or s.startswith(('$', '//', '{', '}', '.')):
            continue
        words = s.split()
        op = (words[1] if words[0].startswith('@') and len(words) > 1 else words[0]).split('.')[0]
        cnt[op] = cnt.get(op, 0) + 1
        n += 1
    return n, cnt


def report(name, n, cnt):
    top = ', '.join(f'{k} {v}' for k, v in sorted(cnt.items(), key=lambda x: -x[1])[:10])
    print(f'{name}: {n} instructions in the loop; mma {cnt.get("mma", 0)}, wgmma {cnt.get("wgmma", 0)}, '
          f'ldmatrix {cnt.get("ldmatrix", 0)}, bar {cnt.get("bar", 0)}; top: {top}')


def rewy(cu, pattern):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'k.ptx')
        subprocess.run(['nvcc', '-O3', '-std=c++17', '-Iinclude', '-Isrc', '-gencode', 'arch=compute_90a,code=sm_90a',
                        '--expt-relaxed-constexpr', '-ptx', cu, '-o', out], check=True)
        L = open(out).read().split('\n')
    ents = [i for i, l in enumerate(L) if '.entry' in l] + [len(L)]
    for a, b in zip(ents, ents[1:]):
        if pattern in L[a]:
            report(L[a].split()[-1].rstrip('('), *loop_counts(L[a:b]))
            return
    sys.exit(f'no entry matching {pattern}')


def fla(root, bv=64, nw=4, ns=2):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    src = open(os.path.join(root, 'fla/ops/common/chunk_delta_h.py')).read().split('\n')
    s = next(i for i, l in enumerate(src) if l.startswith('def chunk_gated_delta_rule_fwd_kernel_h_blockdim64'))
    e = next(i for i in range(s + 1, len(src)) if re.match(r'^(def |@|class )', src[i]))
    body = '\n'.join(src[s:e])
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, 'fwdh_src.py'), 'w') as f:
            f.write('import triton\nimport triton.language as tl\n\n@triton.jit\ndef exp2(x):\n'
                    '    return tl.math.exp2(x.to(tl.float32))\n\n@triton.jit(do_not_specialize=["T"])\n' + body + '\n')
        sys.path.insert(0, d)
        import fwdh_src
        fn = fwdh_src.chunk_gated_delta_rule_fwd_kernel_h_blockdim64
        sig = dict(k='*bf16', v='*bf16', w='*bf16', v_new='*bf16', g='*fp32', gk='*fp32', h='*bf16', h0='*fp32',
                   ht='*fp32', cu_seqlens='*i32', chunk_offsets='*i32', T='i32')
        const = dict(H=16, HV=16, K=128, V=128, BT=64, BV=bv, USE_G=False, USE_GK=False, USE_INITIAL_STATE=True,
                     STORE_FINAL_STATE=True, SAVE_NEW_VALUE=True, STATE_V_FIRST=False, IS_VARLEN=False)
        sig.update({k: 'constexpr' for k in const})
        ast = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in const.items()})
        ck = triton.compile(ast, target=GPUTarget('cuda', 90, 32), options=dict(num_warps=nw, num_stages=ns))
    report(f'FLA fwd_h BV {bv}, {nw} warps, {ns} stages', *loop_counts(ck.asm['ptx'].split('\n')))


if __name__ == '__main__':
    if len(sys.argv) >= 4 and sys.argv[1] == 'rewy':
        rewy(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == 'fla':
        fla(sys.argv[2], *map(int, sys.argv[3:6]))
    else:
        sys.exit(__doc__)
