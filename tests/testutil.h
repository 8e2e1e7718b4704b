/* testutil.h: the few helpers every C test shares. A test program counts its checks and
 * ends with the line "N passed, N failed"; it exits nonzero if any check failed. */
#ifndef REWY_TESTUTIL_H
#define REWY_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

typedef struct test_counts { int passed, failed; } test_counts;

#define CHECK(tc, cond, ...)                                                    \
    do {                                                                        \
        if (cond) (tc)->passed++;                                               \
        else {                                                                  \
            (tc)->failed++;                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
        }                                                                       \
    } while (0)

static inline int test_finish(const test_counts *tc) {
    printf("%d passed, %d failed\n", tc->passed, tc->failed);
    return tc->failed ? 1 : 0;
}

/* REWY_TEST_QUICK=1 (the sanitizer builds) asks for a smaller case matrix. */
static inline int test_quick(void) {
    const char *s = getenv("REWY_TEST_QUICK");
    return s && s[0] == '1';
}

#endif
