/* rng.h: the tests' one random stream, splitmix64 (tiny, deterministic, passes BigCrush), and its
 * uniform [0,1) draw; shared by the accuracy harness, the C tests and the fuzzer. */
#ifndef REWY_CHECK_RNG_H
#define REWY_CHECK_RNG_H
#include <stdint.h>

typedef struct rng { uint64_t s; } rng;

static inline uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; } /* [0,1) */

#endif
