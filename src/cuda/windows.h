/* windows.h: the index arithmetic of policy R's time windows (Plan::win; DESIGN.md, "Memory"), shared by the kernels
 * (common.cuh wraps each function for a Prob) and their host model (tests/cuda/emu_windows.cpp), which checks on a
 * machine without a GPU that the windows cover every chunk once and that every checkpoint the backward uses was
 * written by the forward. Plain C++ (host) and CUDA C++ (host and device); no CUDA headers needed.
 *
 * A sequence's chunks are [c0, c1) of the chunk table (chunk_plan's offsets). Window w of `win` chunks holds its local
 * chunks [w·win, (w+1)·win); in a window's backward the per-chunk workspace regions hold N·win slots, local chunk j of
 * sequence sq at slot sq·win + j − w·win. The forward's one walk leaves the state after every win-th chunk but the
 * sequence's last as checkpoint number done/win − 1 (done: chunks walked), window done/win's start state. */
#ifndef REWY_CUDA_WINDOWS_H
#define REWY_CUDA_WINDOWS_H

#ifdef __CUDACC__
#define WIN_HD __host__ __device__ __forceinline__
#else
#define WIN_HD inline
#endif

namespace rewy_cuda {

/* the windows of win chunks over the longest sequence's ncs chunks; the saved buffer holds one checkpoint fewer */
WIN_HD int win_count(int ncs, int win) { return (ncs + win - 1) / win; }
/* the checkpoint from which the backward recomputes window w, −1 for the first (the caller's h0) */
WIN_HD int win_start_checkpoint(int w) { return w - 1; }
/* the chunks [b, e) of a sequence's chunks [c0, c1) that a walk over local chunks [lo, hi) takes (0, INT_MAX: all) */
WIN_HD void win_seq_chunks(int c0, int c1, int lo, int hi, int &b, int &e) {
    const int nc = c1 - c0;
    b = c0 + (nc < lo ? nc : lo);
    e = c0 + (nc < hi ? nc : hi);
}
/* the checkpoint the forward's step of chunk c leaves (its walk over one whole sequence, [c_begin, c_end)), or −1:
 * after every ck_win-th chunk but the last (whose state is the final one, ht) */
WIN_HD int win_checkpoint(int c_begin, int c, int c_end, int ck_win) {
    const int done = c + 1 - c_begin;
    return c + 1 >= c_end || done % ck_win ? -1 : done / ck_win - 1;
}
/* the chunk of slot x of the window [lo, lo + len) (coff: the sequences' chunk offsets), −1 past its sequence's end */
WIN_HD int win_slot_chunk(const int *coff, int lo, int len, int x) {
    const int sq = x / len, c = coff[sq] + lo + x % len;
    return c < coff[sq + 1] ? c : -1;
}
/* Segments (Plan::seg, the windows at once): window w of sequence sq is segment x = sq·nwin + w, a sequence of its own
 * to the scans; its chunks are [win_seg_offset(x), win_seg_offset(x + 1)), the window's (empty past its sequence's
 * end), and x = N·nwin gives the end, so that the offsets run on like the sequences' (coff: theirs, N + 1 of them) */
WIN_HD int win_seg_offset(const int *coff, int N, int nwin, int win, int x) {
    if (x >= N * nwin) return coff[N];
    const int sq = x / nwin, w = x % nwin;
    int b, e;
    win_seq_chunks(coff[sq], coff[sq + 1], w * win, (w + 1) * win, b, e);
    return b;
}
/* the slot of local chunk idx of sequence sq in the window [lo, lo + len) */
WIN_HD int win_chunk_slot(int sq, int idx, int lo, int len) { return sq * len + idx - lo; }

} // namespace rewy_cuda

#undef WIN_HD
#endif
