/* rewy: command-line check and benchmark of the CPU backend.
 *
 *   rewy check   compare forward, WY backward and ReWY backward with the fp64 oracle
 *   rewy bench   time forward and both complete backwards (median of repeated runs)
 *   rewy version
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "rewy.h"

#define MAX_SHAPES 16

static const rewy_op all_ops[4] = {REWY_OP_DELTANET, REWY_OP_GDN, REWY_OP_KDA, REWY_OP_GDN2};

typedef struct shape { int B, T, H; } shape;

/* Options shared by both commands; each command fills in its own defaults first. */
typedef struct options {
    int n_ops;
    rewy_op ops[4];
    int n_shapes;
    shape shapes[MAX_SHAPES];
    int HV;                 /* 0: HV = H */
    int K, V;
    int chunk;
    rewy_dtype dtype;
    int n_policies;
    rewy_policy policies[2];
    int reps;
    double max_seconds;
    int json;
    int brief;              /* check: one line per case (the worst error/tolerance of each run) */
    unsigned long long seed;
} options;

static void usage(FILE *f) {
    fprintf(f,
        "usage: rewy <command> [options]\n"
        "\n"
        "commands:\n"
        "  check     compare the CPU forward, WY backward and ReWY backward with the fp64\n"
        "            oracle; prints relative errors per quantity and PASS/FAIL (exit 1 on FAIL)\n"
        "  bench     time the CPU forward and the complete WY and ReWY backwards (median ms),\n"
        "            with the counted FLOPs of each local pullback\n"
        "  version   print the library version\n"
        "\n"
        "options:\n"
        "  --op OP,...        deltanet, gdn, kda, gdn2 or all (default all)\n"
        "  --shape BxTxH,...  problem shapes (check: 1x200x2; bench: 1x2048x4,1x8192x16)\n"
        "  --HV N             value heads (default H)\n"
        "  --K N --V N        head dimensions (check: 64; bench: 128)\n"
        "  --chunk N          chunk size 16, 32 or 64 (default 64)\n"
        "  --dtype T          bf16, fp16 or fp32 (default bf16)\n"
        "  --policy P         R, A or both (check: both; bench: R)\n"
        "  --reps N           bench: timed runs per measurement (default 5)\n"
        "  --max-seconds S    bench: stop repeating a measurement after S seconds (default 10)\n"
        "  --seed N           input seed (default 1)\n"
        "  --json             machine-readable output (one JSON array)\n"
        "  --brief            check: one line per case (worst error / tolerance of fwd, WY, ReWY)\n"
        "  -h, --help         this text\n");
}

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0 || v < -2147483647L || v > 2147483647L) return 1;
    *out = (int)v;
    return 0;
}

/* "BxTxH,...": says which shape, and which field of it, is wrong. */
static int parse_shapes(const char *s, options *o) {
    o->n_shapes = 0;
    while (*s) {
        shape sh;
        int used = 0;
        if (o->n_shapes == MAX_SHAPES) {
            fprintf(stderr, "rewy: --shape: at most %d shapes\n", MAX_SHAPES);
            return 1;
        }
        if (sscanf(s, "%dx%dx%d%n", &sh.B, &sh.T, &sh.H, &used) != 3 || (s[used] && s[used] != ',')) {
            fprintf(stderr, "rewy: --shape: shape %d ('%.*s') is not BxTxH, e.g. 1x2048x4\n", o->n_shapes + 1,
                    (int)strcspn(s, ","), s);
            return 1;
        }
        const char *names[3] = {"B", "T", "H"};
        const int vals[3] = {sh.B, sh.T, sh.H};
        for (int f = 0; f < 3; f++)
            if (vals[f] <= 0) {
                fprintf(stderr, "rewy: --shape: shape %d (%dx%dx%d): %s = %d must be positive\n",
                        o->n_shapes + 1, sh.B, sh.T, sh.H, names[f], vals[f]);
                return 1;
            }
        o->shapes[o->n_shapes++] = sh;
        s += used;
        if (*s == ',') s++;
    }
    if (!o->n_shapes) fprintf(stderr, "rewy: --shape: no shape given\n");
    return o->n_shapes == 0;
}

/* "all" or a comma-separated list of operator names, each at most once. */
static int parse_ops(const char *s, options *o) {
    if (!strcmp(s, "all")) {
        o->n_ops = 4;
        memcpy(o->ops, all_ops, sizeof all_ops);
        return 0;
    }
    o->n_ops = 0;
    while (*s) {
        char name[16];
        size_t len = strcspn(s, ",");
        rewy_op op;
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), s);
        if (len >= sizeof name || rewy_check_parse_op(name, &op)) {
            fprintf(stderr, "rewy: --op: unknown operator '%.*s' (deltanet, gdn, kda, gdn2 or all)\n", (int)len, s);
            return 1;
        }
        for (int i = 0; i < o->n_ops; i++)
            if (o->ops[i] == op) {
                fprintf(stderr, "rewy: --op: %s given twice\n", name);
                return 1;
            }
        o->ops[o->n_ops++] = op;
        s += len;
        if (*s == ',') s++;
    }
    if (!o->n_ops) fprintf(stderr, "rewy: --op: no operator given\n");
    return o->n_ops == 0;
}

/* Parses argv[2..]; returns 0 on success, 1 on a bad option, 2 for --help. */
static int parse_options(int argc, char **argv, options *o) {
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, bad = 0;
        static const char *const with_value[] = {"--op", "--shape", "--HV", "--hv", "--K", "--V",
                                                 "--chunk", "--dtype", "--reps", "--max-seconds",
                                                 "--seed", "--policy"};
        int known = 0;
        for (size_t j = 0; j < sizeof with_value / sizeof with_value[0]; j++) known |= !strcmp(a, with_value[j]);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 2;
        else if (!strcmp(a, "--json")) { o->json = 1; takes = 0; }
        else if (!strcmp(a, "--brief")) { o->brief = 1; takes = 0; }
        else if (!known) { fprintf(stderr, "rewy: unknown option %s\n", a); return 1; }
        else if (!val) bad = 1;
        else if (!strcmp(a, "--op")) bad = 2 * parse_ops(val, o);
        else if (!strcmp(a, "--shape")) bad = 2 * parse_shapes(val, o);
        else if (!strcmp(a, "--HV") || !strcmp(a, "--hv")) bad = parse_int(val, &o->HV);
        else if (!strcmp(a, "--K")) bad = parse_int(val, &o->K);
        else if (!strcmp(a, "--V")) bad = parse_int(val, &o->V);
        else if (!strcmp(a, "--chunk")) bad = parse_int(val, &o->chunk);
        else if (!strcmp(a, "--dtype")) bad = rewy_check_parse_dtype(val, &o->dtype);
        else if (!strcmp(a, "--reps")) bad = parse_int(val, &o->reps) || o->reps < 1;
        else if (!strcmp(a, "--max-seconds")) { o->max_seconds = atof(val); bad = !(o->max_seconds > 0); }
        else if (!strcmp(a, "--seed")) o->seed = strtoull(val, NULL, 10);
        else if (!strcmp(a, "--policy")) {
            if (!strcmp(val, "R") || !strcmp(val, "r")) { o->n_policies = 1; o->policies[0] = REWY_POLICY_R; }
            else if (!strcmp(val, "A") || !strcmp(val, "a")) { o->n_policies = 1; o->policies[0] = REWY_POLICY_A; }
            else if (!strcmp(val, "both")) {
                o->n_policies = 2;
                o->policies[0] = REWY_POLICY_R;
                o->policies[1] = REWY_POLICY_A;
            } else bad = 1;
        }
        if (bad) {
            /* parse_shapes and parse_ops have said what is wrong (bad == 2) */
            if (bad != 2) fprintf(stderr, "rewy: bad or missing value for %s\n", a);
            return 1;
        }
        i += takes;
    }
    return 0;
}

static rewy_case make_case(const options *o, rewy_op op, shape sh, rewy_policy pol) {
    rewy_case c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.backend = REWY_BACKEND_CPU;
    c.dtype = o->dtype;
    c.B = sh.B;
    c.T = sh.T;
    c.H = sh.H;
    c.HV = o->HV;
    c.K = o->K;
    c.V = o->V;
    c.chunk_size = o->chunk;
    c.policy = pol;
    c.use_h0 = 1;
    c.use_dht = 1;
    c.seed = o->seed;
    return c;
}

/* Worst rel / tol over the quantities a run (forward, WY or ReWY backward) produces; < 1 passes. */
static double worst_over_tol(const rewy_check_result *r, int run) {
    double w = 0;
    for (int q = 0; q < REWY_Q_COUNT; q++) {
        if (!r->applies[q] || (run == REWY_RUN_FWD) != (q <= REWY_Q_HT)) continue;
        const rewy_check_err *e = &r->err[run][q];
        double x = e->finite ? e->rel / r->tol[q] : 1.0 / 0.0;
        if (!(x <= w)) w = x; /* NaN counts as worst */
    }
    return w;
}

/* --brief: the case, its verdict and the worst error/tolerance of each run on one line. */
static void print_brief(const rewy_case *c, const rewy_check_result *r) {
    char desc[256];
    rewy_check_describe(c, desc, sizeof desc);
    printf("%-4s %-52s", r->pass ? "PASS" : "FAIL", desc);
    if (r->harness_error || r->fwd_status || r->bwd_status[0] || r->bwd_status[1])
        printf(" %s\n", r->msg[0] ? r->msg : "library error");
    else
        printf(" err/tol fwd %.3f WY %.3f ReWY %.3f%s\n", worst_over_tol(r, REWY_RUN_FWD),
               worst_over_tol(r, REWY_RUN_WY), worst_over_tol(r, REWY_RUN_REWY),
               r->saved_intact ? "" : " (saved buffer changed)");
}

static int cmd_check(options *o) {
    int cases = 0, passed = 0;
    if (o->json) printf("[");
    for (int i = 0; i < o->n_ops; i++)
        for (int s = 0; s < o->n_shapes; s++)
            for (int p = 0; p < o->n_policies; p++) {
                rewy_case c = make_case(o, o->ops[i], o->shapes[s], o->policies[p]);
                rewy_check_result r;
                rewy_check_run(&c, NULL, &r);
                if (o->json) {
                    printf(cases ? ",\n " : "\n ");
                    rewy_check_print_json(stdout, &c, &r);
                } else if (o->brief) {
                    print_brief(&c, &r);
                } else {
                    rewy_check_print_table(stdout, &c, &r);
                }
                fflush(stdout);
                cases++;
                passed += r.pass;
            }
    if (o->json) printf("\n]\n");
    else printf("%d/%d cases passed: %s\n", passed, cases, passed == cases ? "PASS" : "FAIL");
    return passed == cases ? 0 : 1;
}

static const char *status_text(rewy_status s) { return s == REWY_OK ? "ok" : rewy_strerror(s); }

static int cmd_bench(options *o) {
    int rows = 0, failed = 0;
    int n = o->chunk ? o->chunk : 64;
    double f_wy = rewy_pullback_flops(REWY_BWD_WY, n, o->K, o->V);
    double f_rewy = rewy_pullback_flops(REWY_BWD_REWY, n, o->K, o->V);
    if (o->json) printf("[");
    else {
        printf("CPU, %s, K=%d V=%d, chunk %d; median of up to %d runs (after one warm-up);\n"
               "WY/ReWY: median of the ratios of back-to-back WY and ReWY runs\n",
               rewy_check_dtype_name(o->dtype), o->K, o->V, n, o->reps);
        printf("local pullback per chunk and head: WY %.3f MFLOP, ReWY %.3f MFLOP (%.1f%% fewer)\n",
               f_wy / 1e6, f_rewy / 1e6, 100.0 * (1.0 - f_rewy / f_wy));
        printf("%-9s %-12s %-3s %10s %12s %12s %8s %5s\n", "op", "B,T,H", "pol", "fwd ms",
               "bwd WY ms", "bwd ReWY ms", "WY/ReWY", "reps");
    }
    for (int i = 0; i < o->n_ops; i++)
        for (int s = 0; s < o->n_shapes; s++)
            for (int p = 0; p < o->n_policies; p++) {
                shape sh = o->shapes[s];
                rewy_case c = make_case(o, o->ops[i], sh, o->policies[p]);
                rewy_check_timing t;
                int rc = rewy_check_time(&c, o->reps, o->max_seconds, &t);
                int ok = rc == 0 && t.status == REWY_OK;
                failed += !ok;
                double ratio = ok ? t.wy_over_rewy : 0;
                char shp[48];
                snprintf(shp, sizeof shp, "%d,%d,%d", sh.B, sh.T, sh.H);
                const char *pol = o->policies[p] == REWY_POLICY_A ? "A" : "R";
                if (o->json) {
                    printf("%s\n {\"op\": \"%s\", \"B\": %d, \"T\": %d, \"H\": %d, \"HV\": %d, "
                           "\"K\": %d, \"V\": %d, \"chunk_size\": %d, \"dtype\": \"%s\", "
                           "\"policy\": \"%s\", \"ok\": %s, \"status\": \"%s\", \"fwd_ms\": %.4f, "
                           "\"bwd_wy_ms\": %.4f, \"bwd_rewy_ms\": %.4f, \"wy_over_rewy\": %.4f, "
                           "\"reps_fwd\": %d, \"reps_bwd\": %d, \"pullback_flops_wy\": %.0f, "
                           "\"pullback_flops_rewy\": %.0f}",
                           rows ? "," : "", rewy_check_op_name(c.op), sh.B, sh.T, sh.H,
                           o->HV ? o->HV : sh.H, o->K, o->V, n, rewy_check_dtype_name(o->dtype), pol,
                           ok ? "true" : "false", rc ? t.msg : status_text(t.status),
                           t.fwd_ms, t.bwd_wy_ms, t.bwd_rewy_ms, ratio, t.reps_fwd, t.reps_bwd,
                           f_wy, f_rewy);
                } else if (!ok) {
                    printf("%-9s %-12s %-3s  failed: %s\n", rewy_check_op_name(c.op), shp, pol,
                           rc ? (t.msg[0] ? t.msg : "harness error") : status_text(t.status));
                } else {
                    printf("%-9s %-12s %-3s %10.3f %12.3f %12.3f %8.3f %5d\n", rewy_check_op_name(c.op),
                           shp, pol, t.fwd_ms, t.bwd_wy_ms, t.bwd_rewy_ms, ratio, t.reps_bwd);
                }
                fflush(stdout);
                rows++;
            }
    if (o->json) printf("\n]\n");
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? 1 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("rewy %s (CUDA backend %s)\n", rewy_version(), rewy_has_cuda() ? "compiled in" : "not compiled in");
        return 0;
    }
    int check = !strcmp(argv[1], "check"), bench = !strcmp(argv[1], "bench");
    if (!check && !bench) {
        fprintf(stderr, "rewy: unknown command '%s'\n", argv[1]);
        usage(stderr);
        return 1;
    }
    options o;
    memset(&o, 0, sizeof o);
    o.n_ops = 4;
    memcpy(o.ops, all_ops, sizeof all_ops);
    o.dtype = REWY_BF16;
    o.reps = 5;
    o.max_seconds = 10;
    o.seed = 1;
    if (check) {
        o.n_shapes = 1;
        o.shapes[0] = (shape){1, 200, 2};
        o.K = o.V = 64;
        o.n_policies = 2;
        o.policies[0] = REWY_POLICY_R;
        o.policies[1] = REWY_POLICY_A;
    } else {
        o.n_shapes = 2;
        o.shapes[0] = (shape){1, 2048, 4};
        o.shapes[1] = (shape){1, 8192, 16};
        o.K = o.V = 128;
        o.n_policies = 1;
        o.policies[0] = REWY_POLICY_R;
    }
    int rc = parse_options(argc, argv, &o);
    if (rc == 2) { usage(stdout); return 0; }
    if (rc) { fprintf(stderr, "(rewy --help lists the options)\n"); return 1; }
    return check ? cmd_check(&o) : cmd_bench(&o);
}
