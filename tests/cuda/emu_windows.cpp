// Host model of policy R's time windows (src/cuda/windows.h, the index arithmetic the kernels and the host planner
// share; DESIGN.md, "Memory"), on a machine without a GPU. For random batches (uniform and varlen, sequences of 1 to
// 40 chunks) and every window size that splits the longest sequence, it walks the forward and the backward as
// backend_common.cuh orders them and checks:
//   - the forward's one walk writes each checkpoint of each sequence at most once, inside the saved buffer's
//     win_count − 1 checkpoints;
//   - the backward's windows, last to first, take every chunk exactly once, and each sequence's reverse walk goes on
//     from the chunk where the later window stopped (the carry);
//   - each window's recompute starts from the state before its first chunk: the caller's h0 for the first window,
//     else a checkpoint that the forward wrote after exactly the chunks before it;
//   - a window's slots and its chunks correspond one to one, inside its N·win workspace slots;
//   - as segments (Plan::seg: the windows at once, each a sequence of its own), their offsets give each the window's
//     chunks and run on from the first chunk to the last.
// The same checks run once against a deliberately wrong start checkpoint, which they must reject (a check that
// cannot fail proves nothing). The kernels' own loads and stores are the GPU tests' (test_cuda with REWY_CUDA_WIN).
//   make emu-windows
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/windows.h"

using namespace rewy_cuda;

namespace {

struct Batch {
    int N;
    std::vector<int> coff; // the sequences' chunk offsets (chunk_plan's)
    int ncs;               // the longest sequence's chunks
};

// The checks for one batch and window size; start(w) is the checkpoint window w's recompute reads (−1: h0).
// Returns the number of failed checks and counts the chunks it visited.
template <class Start> int check(const Batch &bt, int win, Start start, long &chunks, bool quiet = false) {
    int bad = 0;
    auto fail = [&](const char *what, int w, int sq) {
        if (bad++ < 3 && !quiet) std::printf("  FAIL win=%d w=%d seq=%d: %s\n", win, w, sq, what);
    };
    const int N = bt.N, nwin = win_count(bt.ncs, win), nck = nwin - 1;
    // forward: written[k][sq] = the chunks walked when checkpoint k of sequence sq was left (−1: never)
    std::vector<std::vector<int>> written(nck > 0 ? nck : 0, std::vector<int>(N, -1));
    for (int sq = 0; sq < N; sq++) {
        int b, e;
        win_seq_chunks(bt.coff[sq], bt.coff[sq + 1], 0, 1 << 30, b, e); // the forward walks whole sequences
        for (int c = b; c < e; c++) {
            const int k = win_checkpoint(b, c, e, win);
            if (k < 0) continue;
            if (k >= nck) fail("checkpoint past the saved buffer's", -1, sq);
            else if (written[k][sq] >= 0) fail("checkpoint written twice", -1, sq);
            else written[k][sq] = c + 1 - b;
        }
    }
    // backward: windows from the last; next[sq] = the chunk the reverse walk of sq takes next (the carry)
    std::vector<int> next(N), seen(bt.coff[N], 0);
    for (int sq = 0; sq < N; sq++) next[sq] = bt.coff[sq + 1] - 1;
    for (int w = nwin - 1; w >= 0; w--) {
        const int lo = w * win;
        for (int sq = 0; sq < N; sq++) {
            int b, e;
            win_seq_chunks(bt.coff[sq], bt.coff[sq + 1], lo, lo + win, b, e);
            if (b >= e) continue; // empty for this sequence: its carry stays, no state is read
            for (int c = b; c < e; c++) seen[c]++;
            chunks += e - b;
            if (e - 1 != next[sq]) fail("reverse walk does not go on where the later window stopped", w, sq);
            next[sq] = b - 1;
            const int k = start(w), before = b - bt.coff[sq];
            if (k < 0) {
                if (before != 0) fail("window starts from h0 after its sequence's start", w, sq);
            } else if (k >= nck || written[k][sq] != before) {
                fail("recompute starts from a checkpoint not written after the chunks before it", w, sq);
            }
            // slots: each chunk of the window has one, inside N·win, and it maps back
            for (int c = b; c < e; c++) {
                const int x = win_chunk_slot(sq, c - bt.coff[sq], lo, win);
                if (x < 0 || x >= N * win || win_slot_chunk(bt.coff.data(), lo, win, x) != c)
                    fail("chunk and slot do not correspond", w, sq);
            }
        }
        for (int x = 0; x < N * win; x++) { // and every slot's chunk is the window's
            const int c = win_slot_chunk(bt.coff.data(), lo, win, x), sq = x / win;
            if (c >= 0 && (c < bt.coff[sq] + lo || c >= bt.coff[sq + 1] || c >= bt.coff[sq] + lo + win))
                fail("slot's chunk outside its sequence's window", w, sq);
        }
    }
    // segments (Plan::seg): window w of sequence sq as sequence x = sq·nwin + w of its own, its chunks the window's
    // (whose start checkpoints the window loop above checked), the offsets running on to coff[N]
    const int *co = bt.coff.data();
    if (win_seg_offset(co, N, nwin, win, 0) != co[0] || win_seg_offset(co, N, nwin, win, N * nwin) != co[N])
        fail("segments' offsets do not start at the first chunk and end at the last", 0, 0);
    for (int x = 0; x < N * nwin; x++) {
        const int sq = x / nwin, w = x % nwin;
        int b, e;
        win_seq_chunks(co[sq], co[sq + 1], w * win, (w + 1) * win, b, e);
        if (win_seg_offset(co, N, nwin, win, x) != b || win_seg_offset(co, N, nwin, win, x + 1) != e)
            fail("segment's chunks are not its window's", w, sq);
    }
    for (int sq = 0; sq < N; sq++) {
        if (next[sq] != bt.coff[sq] - 1) fail("reverse walk stops before its sequence's start", 0, sq);
        for (int c = bt.coff[sq]; c < bt.coff[sq + 1]; c++)
            if (seen[c] != 1) fail("chunk not taken exactly once", 0, sq);
    }
    return bad;
}

} // namespace

int main() {
    std::mt19937 rng(29);
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    long chunks = 0, cases = 0;
    int bad = 0, caught = 0;
    for (int trial = 0; trial < 600; trial++) {
        Batch bt;
        bt.N = uni(1, 6);
        const bool varlen = trial % 3 != 0;
        const int len = uni(1, 40);
        bt.coff.assign(bt.N + 1, 0);
        for (int sq = 0; sq < bt.N; sq++) bt.coff[sq + 1] = bt.coff[sq] + (varlen ? uni(1, 40) : len);
        bt.ncs = 0;
        for (int sq = 0; sq < bt.N; sq++) bt.ncs = std::max(bt.ncs, bt.coff[sq + 1] - bt.coff[sq]);
        for (int win = 1; win < bt.ncs; win++) { // windows split the longest sequence (plan_windows: win < ncs)
            bad += check(bt, win, win_start_checkpoint, chunks);
            cases++;
            long ignored = 0; // the same checks must reject a start one checkpoint late
            if (check(bt, win, [](int w) { return w; }, ignored, true) > 0) caught++;
        }
    }
    std::printf("emu_windows: %ld batch × window cases, %ld window chunks checked: %d failed; a wrong start "
                "checkpoint rejected in %d of %ld\n", cases, chunks, bad, caught, cases);
    return bad == 0 && caught == cases && cases > 0 ? 0 : 1;
}
