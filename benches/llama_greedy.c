/* The llama.cpp side of the engine rows, through llama.cpp's public C API (llama.h),
 * for a llama.cpp installed as a system library (e.g. Debian's libllama-dev; see
 * scripts/llama_system.sh). Prints one JSON line with the keys of benches/engine_baselines.py.
 *
 *   llama_greedy load     GGUF                 [THREADS]
 *   llama_greedy generate GGUF IDS N           [THREADS]
 *   llama_greedy prefill  GGUF IDS REPS        [THREADS]
 *
 * IDS: comma-separated token ids (the ids sinklab gets). "generate" evaluates IDS, then picks the
 * argmax of the last logits N times, feeding each token back (greedy, KV cache, no EOS stop),
 * and times prompt + N tokens as sinklab's generate_greedy does. "prefill" evaluates IDS from an
 * empty cache in one batch (n_batch = n_ubatch = max(512, |IDS|)), best of REPS after a warm-up.
 * LLAMA_GREEDY_VERSION (environment) names the build in the "version" key.
 * Threads: n_threads = n_threads_batch = THREADS (default 2). Everything else is llama.cpp's
 * default context (flash attention "auto", f16 KV cache).
 */
#include <llama.h>
#include <ggml-backend.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static long peak_rss_kb(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static int parse_ids(const char *s, llama_token **out) {
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    *out = malloc(sizeof(llama_token) * n);
    int k = 0;
    char *end;
    while (*s) {
        long v = strtol(s, &end, 10);
        if (end == s) { fprintf(stderr, "llama_greedy: bad id list near '%s'\n", s); exit(2); }
        (*out)[k++] = (llama_token)v;
        s = *end == ',' ? end + 1 : end;
    }
    return k;
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if (*s == '\n') printf("\\n");
        else if ((unsigned char)*s >= 0x20) putchar(*s);
    }
    putchar('"');
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: llama_greedy load|generate|prefill GGUF [IDS N|REPS] [THREADS]\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    int gen = !strcmp(mode, "generate"), pre = !strcmp(mode, "prefill"), load = !strcmp(mode, "load");
    if (!gen && !pre && !load) { fprintf(stderr, "llama_greedy: unknown mode %s\n", mode); return 2; }
    if ((gen || pre) && argc < 5) { fprintf(stderr, "llama_greedy: %s needs IDS and a count\n", mode); return 2; }
    llama_token *ids = NULL;
    int n_ids = (gen || pre) ? parse_ids(argv[3], &ids) : 0;
    int count = (gen || pre) ? atoi(argv[4]) : 0;
    int ti = load ? 3 : 5;
    int threads = argc > ti ? atoi(argv[ti]) : 2;

    llama_log_set(quiet, NULL);
    ggml_backend_load_all();
    llama_backend_init();
    double t0 = now();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "llama_greedy: cannot load %s\n", path); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    int batch = n_ids > 512 ? n_ids : 512;
    cp.n_ctx = (uint32_t)(n_ids + (gen ? count : 0) + 8 > 512 ? n_ids + (gen ? count : 0) + 8 : 512);
    cp.n_batch = cp.n_ubatch = (uint32_t)batch;
    cp.n_threads = cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "llama_greedy: cannot make a context\n"); return 1; }
    double load_s = now() - t0;
    long rss_load = peak_rss_kb();
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int nv = llama_vocab_n_tokens(vocab);

    printf("{\"mode\": \"llama-%s\", \"model\": ", mode);
    json_string(path);
    const char *version = getenv("LLAMA_GREEDY_VERSION");
    printf(", \"threads\": %d, \"tool\": \"llama.cpp\", \"version\": ", threads);
    json_string(version ? version : "llama.cpp C API (system library)");
    printf(", \"system_info\": ");
    json_string(llama_print_system_info());
    printf(", \"load_s\": %.6f, \"peak_rss_after_load_kb\": %ld", load_s, rss_load);

    if (gen) {
        llama_token *got = malloc(sizeof(llama_token) * (count > 0 ? count : 1));
        t0 = now();
        if (llama_decode(ctx, llama_batch_get_one(ids, n_ids))) { fprintf(stderr, "llama_greedy: decode failed\n"); return 1; }
        for (int k = 0; k < count; k++) {
            got[k] = argmax(llama_get_logits_ith(ctx, -1), nv);
            if (k + 1 < count && llama_decode(ctx, llama_batch_get_one(&got[k], 1))) {
                fprintf(stderr, "llama_greedy: decode failed at token %d\n", k);
                return 1;
            }
        }
        double dt = now() - t0;
        printf(", \"prompt_tokens\": %d, \"new_tokens\": %d, \"wall_s\": %.6f, \"tokens_per_s\": %.4f, \"first_ids\": [",
               n_ids, count, dt, count / dt);
        for (int k = 0; k < count && k < 16; k++) printf(k ? ", %d" : "%d", got[k]);
        printf("]");
    } else if (pre) {
        int reps = count > 0 ? count : 1;
        double best = 1e300;
        printf(", \"tokens\": %d, \"capture\": \"none\", \"times_s\": [", n_ids);
        for (int r = -(reps > 1); r < reps; r++) {
            llama_memory_clear(llama_get_memory(ctx), true);
            double s = now();
            if (llama_decode(ctx, llama_batch_get_one(ids, n_ids))) { fprintf(stderr, "llama_greedy: decode failed\n"); return 1; }
            (void)llama_get_logits_ith(ctx, -1);
            s = now() - s;
            if (r < 0) continue; /* warm-up */
            if (s < best) best = s;
            printf(r ? ", %.6f" : "%.6f", s);
        }
        printf("], \"best_s\": %.6f", best);
    }
    printf(", \"peak_rss_kb\": %ld}\n", peak_rss_kb());
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
