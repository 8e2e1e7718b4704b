"""ws_protocol.py: a model check of chain_ws.cu's hand-off protocol (no GPU needed).

    python3 bench/dev/ws_protocol.py [schedules]      # default 2000 random schedules per case

Each warp role of a chain_ws.cu block (the copy warp C and the warpgroups W0, W1, W2) is written below as the sequence
of what it does per chunk, in the kernel's order: named-barrier arrivals and waits (bar.arrive / bar.sync, counted in
threads, one generation per chunk), reads and writes of the shared tiles, and a wgmma's reads as a span from its issue
to its wgmma.wait (the hardware may read any time in between). The checker runs the roles under random interleavings
with count-based barriers and vector clocks, and reports, per kernel and chunk count:
  DEADLOCK            every unfinished role waits;
  COUNT MISMATCH      two sides of a barrier disagree on its count;
  OVERFLOW / MIXED    arrivals of two chunks' generations meet in one barrier;
  LEFT MID-COUNT      a barrier ends the kernel with arrivals and no completion;
  RACE                a write and another role's access to one tile are not ordered by happens-before
                      (a wgmma read is ordered only if the write is before its issue or after its wait).
A change to the protocol (a barrier moved, a buffer shared, FULL split per warpgroup) goes here first, mirrored from
the kernel, and must print only `ok`. Session 27's desk reviews wrote the first versions of this model; removing a
B_F wait, an EMPTY wait or moving Ō' after its B_O arrival makes it fail.
"""
import random
import sys

FULL, EMPTY, BS, BR, BF, BO, BT = 1, 3, 5, 6, 7, 8, 9  # chain_ws.cu's barrier ids (FULL, EMPTY: + stage)
THREADS = {'C': 32, 'W0': 128, 'W1': 128, 'W2': 128}
ALL = 416


class Prog:
    """One role's operations: arrive / sync (barrier, count, chunk), read / write (tile, chunk), wgmma read spans."""

    def __init__(self):
        self.ops = []

    def arrive(self, b, n, j): self.ops.append(('arr', b, n, j))
    def sync(self, b, n, j): self.ops.append(('sync', b, n, j))
    def rd(self, buf, j): self.ops.append(('rd', buf, j))
    def wr(self, buf, j): self.ops.append(('wr', buf, j))
    def issue(self, key, buf, j): self.ops.append(('issue', key, buf, j))  # a wgmma starts reading buf
    def wait(self, *keys): self.ops.extend(('wait', k) for k in keys)       # wgmma.wait_group 0


def copy_warp(p, nch, reads=()):
    """chunk j's tiles into stage j & 1, one chunk ahead; reads: the global tiles it reads besides the inputs"""
    for j in range(nch):
        st = j & 1
        if j >= 2:
            p.sync(EMPTY + st, ALL, j - 2)
        for buf in reads:
            p.rd(buf % j, j)
        p.wr('st%d' % st, j)
        p.arrive(FULL + st, ALL, j)
    for j in range(max(nch - 2, 0), nch):  # the drain
        p.sync(EMPTY + (j & 1), ALL, j)


def state_out(p, j, st, copy):  # ws_state_out: WG0's opening of a step
    p.sync(FULL + st, ALL, j)
    if j > 0:
        p.sync(BF, 256, j - 1)
    p.wr(copy, j)
    p.arrive(BS, 384, j)
    p.rd('st%d' % st, j)  # G


def forward(role, nch, rec):
    """fwd_ws_kernel: the forward pass with its output (rec False) or policy R's recompute (S_c, R stored)."""
    p = Prog()
    if role == 'C':
        copy_warp(p, nch, ('U%d',) if rec else ())  # the recompute reads U(c) from R's region, where W2 writes R(c)
        return p.ops
    for j in range(nch):
        st = j & 1
        if role == 'W0':
            state_out(p, j, st, 'Ss')
            p.sync(BR, 384, j)
            p.issue('k', 'st%d' % st, j); p.issue('r', 'Rs', j); p.wait('k', 'r')  # S += Kᵀ R̃
            p.arrive(EMPTY + st, ALL, j)
        elif role == 'W1':
            p.sync(FULL + st, ALL, j); p.sync(BS, 384, j)
            p.issue('w', 'st%d' % st, j); p.issue('s', 'Ss', j); p.wait('w', 's')  # W S
            p.rd('st%d' % st, j)  # U, G
            p.wr('Rs', j); p.wr('Ro', j)
            p.arrive(BR, 384, j); p.arrive(EMPTY + st, ALL, j)
        elif rec:  # W2: the stores of S_c and R (R over U in global memory)
            p.sync(FULL + st, ALL, j); p.sync(BS, 384, j)
            p.rd('Ss', j); p.sync(BR, 384, j); p.rd('Ro', j); p.wr('U%d' % j, j)
            p.arrive(BF, 256, j); p.arrive(EMPTY + st, ALL, j)
        else:  # W2: the output
            p.sync(FULL + st, ALL, j); p.sync(BS, 384, j)
            p.issue('q', 'st%d' % st, j); p.issue('s', 'Ss', j); p.wait('q', 's')  # Q S
            p.rd('st%d' % st, j)  # G
            p.sync(BR, 384, j)
            p.issue('c', 'st%d' % st, j); p.issue('r', 'Ro', j); p.wait('c', 'r')  # + C_q R
            p.arrive(BF, 256, j); p.arrive(EMPTY + st, ALL, j)
    if role == 'W0' and nch > 0:
        p.sync(BF, 256, nch - 1)
    return p.ops


def reverse(role, nch, pf=True):
    """bwd_ws_kernel: the reverse chain, W form; Ō' (op) written by W2 into the stage; pf: W1 forms P = Aᵀ R̄ (its own
    tile Rt, A from the stage) after handing −R̄ to W0"""
    p = Prog()
    if role == 'C':
        copy_warp(p, nch)
        return p.ops
    for j in range(nch):
        st = j & 1
        if role == 'W0':
            state_out(p, j, st, 'Sbs')
            p.sync(BO, 256, j)
            p.issue('q', 'st%d' % st, j); p.issue('o', 'op%d' % st, j)  # + Qᵀ Ō'
            p.sync(BR, 256, j)
            p.wait('q', 'o')
            p.issue('w', 'st%d' % st, j); p.issue('r', 'Rs', j); p.wait('w', 'r')  # − Wᵀ R̄
            p.arrive(EMPTY + st, ALL, j)
        elif role == 'W1':
            p.sync(FULL + st, ALL, j)
            p.issue('y', 'st%d' % st, j)  # C_qᵀ Ō
            p.sync(BS, 384, j)
            p.issue('k', 'st%d' % st, j); p.issue('s', 'Sbs', j); p.wait('y', 'k', 's')  # K S̄⁺
            p.rd('st%d' % st, j)  # G
            p.wr('Rs', j)
            if pf:
                p.wr('Rt', j)
            p.arrive(BR, 256, j)
            if pf:
                p.sync(BT, 128, j)
                p.issue('a', 'st%d' % st, j); p.issue('t', 'Rt', j); p.wait('a', 't')  # P = Aᵀ R̄
            p.arrive(EMPTY + st, ALL, j)
        else:  # W2: Ō', then the store of S̄⁺
            p.sync(FULL + st, ALL, j)
            p.rd('st%d' % st, j); p.wr('op%d' % st, j)
            p.arrive(BO, 256, j); p.sync(BS, 384, j)
            p.rd('Sbs', j)
            p.arrive(BF, 256, j); p.arrive(EMPTY + st, ALL, j)
    if role == 'W0' and nch > 0:
        p.sync(BF, 256, nch - 1)
    return p.ops


def check(progs, seed):
    rnd = random.Random(seed)
    roles = list(progs)
    pc = {r: 0 for r in roles}
    clock = {r: {s: 0 for s in roles} for r in roles}
    join = lambda a, b: {k: max(a[k], b[k]) for k in a}
    before = lambda a, b: all(a[k] <= b[k] for k in a)
    waiting, bars, spans, accesses = {}, {}, {r: {} for r in roles}, []
    while True:
        ready = [r for r in roles if pc[r] < len(progs[r]) and r not in waiting]
        if not ready:
            if waiting or any(pc[r] < len(progs[r]) for r in roles):
                return 'DEADLOCK at %s' % pc
            break
        r = rnd.choice(ready)
        op = progs[r][pc[r]]
        pc[r] += 1
        clock[r][r] += 1
        if op[0] in ('rd', 'wr'):
            accesses.append((op[1], op[0], r, dict(clock[r]), dict(clock[r]), op[2]))
        elif op[0] == 'issue':
            spans[r][op[1]] = (op[2], dict(clock[r]), op[3])
        elif op[0] == 'wait':
            buf, start, j = spans[r].pop(op[1])
            accesses.append((buf, 'rd', r, start, dict(clock[r]), j))
        else:
            _, b, n, j = op
            bar = bars.setdefault(b, {'n': n, 'count': 0, 'gens': set(), 'clock': {s: 0 for s in roles}, 'waiters': []})
            if bar['n'] != n:
                return 'COUNT MISMATCH on barrier %d' % b
            bar['count'] += THREADS[r]
            bar['gens'].add(j)
            bar['clock'] = join(bar['clock'], clock[r])
            if op[0] == 'sync':
                bar['waiters'].append(r)
                waiting[r] = b
            if bar['count'] > n:
                return 'OVERFLOW on barrier %d' % b
            if bar['count'] == n:
                if len(bar['gens']) != 1:
                    return 'MIXED generations %s on barrier %d' % (sorted(bar['gens']), b)
                for w in bar['waiters']:
                    clock[w] = join(clock[w], bar['clock'])
                    del waiting[w]
                del bars[b]
    if bars:
        return 'LEFT MID-COUNT: barriers %s' % sorted(bars)
    for i, a in enumerate(accesses):
        for c in accesses[i + 1:]:
            if a[0] != c[0] or a[2] == c[2] or (a[1] == 'rd' and c[1] == 'rd'):
                continue
            if not (before(a[4], c[3]) or before(c[4], a[3])):
                return 'RACE on %s: %s %s (chunk %d) against %s %s (chunk %d)' % (a[0], a[2], a[1], a[5], c[2], c[1], c[5])
    return 'ok'


def main():
    schedules = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    kernels = {'forward': lambda r, n: forward(r, n, False), 'recompute': lambda r, n: forward(r, n, True),
               'reverse': reverse, 'reverse (WY: R̄)': lambda r, n: reverse(r, n, False)}
    bad = 0
    for name, make in kernels.items():
        for nch in range(7):
            progs = {r: make(r, nch) for r in THREADS}
            results = {}
            for seed in range(schedules):
                res = check(progs, seed)
                results[res] = results.get(res, 0) + 1
            bad += sum(v for k, v in results.items() if k != 'ok')
            print('%-16s %d chunks: %s' % (name, nch, results))
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
