/* backend.c: the saved record both backends write and compare (backend.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

static uint64_t seqlens_hash(const int32_t *cu, int n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bit, over the little-endian bytes of each value */
    for (int i = 0; i <= n; i++) {
        uint32_t x = (uint32_t)cu[i];
        for (int b = 0; b < 4; b++) {
            h ^= (x >> (8 * b)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

rewy_saved_record rewy_saved_record_of(const rewy_config *c, const int32_t *cu, int has_h0, int time_window,
                                       const char *magic) {
    rewy_saved_record r;
    memset(&r, 0, sizeof r); /* every byte defined: the record is copied to the saved buffer whole */
    memcpy(r.magic, magic, strlen(magic) < 8 ? strlen(magic) : 7);
    r.op = c->op;
    r.dtype = c->dtype;
    r.B = c->B;
    r.T = c->T;
    r.H = c->H;
    r.HV = c->HV ? c->HV : c->H;
    r.K = c->K;
    r.V = c->V;
    r.chunk_size = c->chunk_size ? c->chunk_size : 64;
    r.num_seqs = c->cu_seqlens ? c->num_seqs : 0;
    r.policy = c->policy;
    r.state_v_first = c->state_v_first != 0;
    r.has_h0 = has_h0 != 0;
    r.time_window = time_window;
    r.scale = c->scale != 0.0f ? c->scale : 1.0f / sqrtf((float)c->K);
    r.seqlens_hash = cu ? seqlens_hash(cu, c->num_seqs) : 0;
    return r;
}

int rewy_saved_record_diff(const rewy_saved_record *f, const rewy_saved_record *b, char *msg, size_t len) {
    char buf[256];
    if (memcmp(f->magic, b->magic, 8) != 0)
        snprintf(buf, sizeof buf, "saved: not written by rewy_forward on this backend (no \"%.8s\" record)", b->magic);
    else {
        const struct { const char *name; long long fwd, bwd; } x[] = {
            {"op", f->op, b->op}, {"dtype", f->dtype, b->dtype}, {"B", f->B, b->B}, {"T", f->T, b->T},
            {"H", f->H, b->H}, {"HV", f->HV, b->HV}, {"K", f->K, b->K}, {"V", f->V, b->V},
            {"chunk_size", f->chunk_size, b->chunk_size}, {"num_seqs", f->num_seqs, b->num_seqs},
            {"policy", f->policy, b->policy}, {"state_v_first", f->state_v_first, b->state_v_first},
            {"time_window", f->time_window, b->time_window}};
        size_t i = 0;
        while (i < sizeof x / sizeof x[0] && x[i].fwd == x[i].bwd) i++;
        if (i < sizeof x / sizeof x[0])
            snprintf(buf, sizeof buf, "%s differs from the forward's (%lld here, %lld in saved)", x[i].name, x[i].bwd,
                     x[i].fwd);
        else if (f->scale != b->scale)
            snprintf(buf, sizeof buf, "scale differs from the forward's (%g here, %g in saved)", b->scale, f->scale);
        else if (f->has_h0 != b->has_h0)
            snprintf(buf, sizeof buf, "h0: given to %s but not to the other", f->has_h0 ? "the forward" : "the backward");
        else if (f->seqlens_hash != b->seqlens_hash)
            snprintf(buf, sizeof buf,
                     "cu_seqlens values differ from the forward's (hash %016llx here, %016llx in saved)",
                     (unsigned long long)b->seqlens_hash, (unsigned long long)f->seqlens_hash);
        else
            return 0;
    }
    if (msg && len) snprintf(msg, len, "%s", buf);
    return 1;
}
