"""tr_lanes_check.py: the transposed fragment moves of dev/s53-fwdtr (ws.cuh's WgFragLanesT with stmatrix/ldmatrix
.trans) checked index by index on the host: for every thread of a warpgroup and every accumulator element (wgmma.cuh's
layout: row 16*warp + lane/4 + 8*((e/2)%2), column 8*(e/4) + 2*(lane%4) + e%2) the byte the .trans move puts it at
(memory row j of piece k is named by lane 8k + j of the same warp and holds the piece's column j, element i at 2i) must
be where the tile [j][column] keeps it: the 128-B swizzled box (S's copy, V) and the core-matrix cm_k<64> tile (R).
Run: python3 bench/dev/tr_lanes_check.py (prints the mismatches, 0 when the lanes are right)."""


def sw128(row, col):  # a [64][64] bf16 box with the 128-B swizzle (tma.cuh's sw128), bytes
    return row * 128 + (((col >> 3) ^ (row & 7)) << 4) + (col & 7) * 2


def cm_k(row, col):  # wgmma.cuh's cm_k<64>(row, col), bytes
    return (((row >> 3) * 8 + (col >> 3)) * 64 + (row & 7) * 8 + (col & 7)) * 2


def lanes_t(t, sw):  # WgFragLanesT's base for thread t
    lane = t & 31
    m, r, x = lane >> 3, lane & 7, 2 * ((t >> 5) & 3) + ((lane >> 3) & 1)
    return (8 * (m >> 1) + r) * 128 + ((x ^ r) << 4) if sw else (8 * (m >> 1) + x) * 128 + r * 16


bad = 0
for sw, tile in ((True, sw128), (False, cm_k)):
    for t in range(128):
        w, lane = t >> 5, t & 31
        for s in range(4):          # the k16 step / the call's group of four pieces (column blocks 2s, 2s + 1)
            for k in range(4):      # register k of the group: piece k
                for a in range(2):  # the pair's element
                    e = 8 * s + 2 * k + a
                    row = 16 * w + lane // 4 + 8 * ((e >> 1) & 1)  # the fragment's row: a value column
                    col = 8 * (e >> 2) + 2 * (lane % 4) + (e & 1)   # its column: a token or a feature
                    i, j = lane // 4, 2 * (lane % 4) + a             # within the 8 x 8 piece
                    at = lanes_t((w << 5) | (8 * k + j), sw) + 2 * s * 1024 + 2 * i
                    bad += at != tile(col, row)
print("mismatches", bad)
