/* sample_cpu.c: the fp32 reference of ops_sample. One row of logits at a time:
 *
 *   y = logits / T                   (T = 1 for greedy rows, temperature 0)
 *   logprob = y[token] - logsumexp(y)  over the whole vocabulary
 *   greedy:  token = first argmax of the logits
 *   else:    keep the top-k tokens, then the top-p nucleus of what is left,
 *            and draw among the kept tokens with the exponential race of
 *            sample_common.h.
 *
 * Truncation thresholds come from a radix selection over the order-preserving
 * keys of y, one byte per pass from the top: "the largest key v such that the
 * weight of the tokens with key >= v reaches the target", with weight 1 and
 * target k for top-k, and the fixed-point mass with target floor(p * total)
 * for top-p. Tokens tied with the threshold are all kept. The CUDA kernel runs
 * the same selection with shared-memory histograms, so both backends keep the
 * same set; it needs no scratch and no sorting. */
#include <math.h>

#include "kernels/ops_cpu.h"
#include "kernels/sample_common.h"

/* Weight of token i in a selection: 1 (top-k) or its fixed-point mass. */
typedef struct {
    const float *y;
    float max;
    int by_mass;
    uint32_t floor_key; /* tokens with a smaller key are already cut */
} select_input;

static uint64_t select_weight(const select_input *in, int i) {
    if (!in->by_mass) return 1;
    return sample_mass(expf(in->y[i] - in->max));
}

/* The largest key v with sum of weights over {key >= v, key >= floor_key} >=
 * target (target >= 1 and at most the total weight). */
static uint32_t radix_select(const select_input *in, int V, uint64_t target) {
    uint32_t prefix = 0, mask = 0;
    uint64_t above = 0;
    uint64_t hist[256];
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = 0; d < 256; d++) hist[d] = 0;
        for (int i = 0; i < V; i++) {
            uint32_t key = sample_float_key(in->y[i]);
            if (key < in->floor_key || (key & mask) != prefix) continue;
            hist[(key >> shift) & 255u] += select_weight(in, i);
        }
        int d = 255;
        for (; d > 0; d--) {
            if (above + hist[d] >= target) break;
            above += hist[d];
        }
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
    }
    return prefix;
}

static void sample_row(int32_t *token, float *logprob, float *z, const sample_params *p, int V, int row) {
    const int greedy = !(p->temperature > 0.0f);
    if (!greedy && !(p->top_p > 0.0f && p->top_p <= 1.0f))
        DK_ABORT("ops_sample: row %d has top_p %g outside (0, 1]", row, (double)p->top_p);
    if (p->top_k < 0) DK_ABORT("ops_sample: row %d has negative top_k %d", row, p->top_k);
    if (!greedy && !isfinite(p->temperature))
        DK_ABORT("ops_sample: row %d has temperature %g", row, (double)p->temperature);

    /* Tempered logits in place (the op may use its input as scratch). */
    if (!greedy)
        for (int i = 0; i < V; i++) z[i] = z[i] / p->temperature;
    int arg = 0;
    float m = z[0];
    for (int i = 1; i < V; i++)
        if (z[i] > m) m = z[i], arg = i;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)z[i] - m);
    float lse = m + (float)log(sum);

    if (!greedy) {
        select_input in = {.y = z, .max = m, .by_mass = 0, .floor_key = 0};
        if (p->top_k > 0 && p->top_k < V) in.floor_key = radix_select(&in, V, (uint64_t)p->top_k);
        if (p->top_p < 1.0f) {
            uint64_t total = 0;
            in.by_mass = 1;
            for (int i = 0; i < V; i++)
                if (sample_float_key(z[i]) >= in.floor_key) total += select_weight(&in, i);
            uint64_t target = (uint64_t)((double)p->top_p * (double)total);
            if (target < 1) target = 1;
            in.floor_key = radix_select(&in, V, target);
        }
        const uint64_t key = sample_row_key(p->seed, p->counter);
        float best = -INFINITY;
        arg = -1;
        for (int i = 0; i < V; i++) {
            if (sample_float_key(z[i]) < in.floor_key) continue;
            float e = -logf(sample_uniform(key, (uint32_t)i));
            float r = z[i] - logf(e);
            if (arg < 0 || r > best) best = r, arg = i;
        }
    }
    *token = arg;
    *logprob = z[arg] - lse;
}

void cpu_sample(ops_ctx *ctx, int32_t *tokens, float *logprob, float *logits, const sample_params *params, int n,
                int V) {
    if (n < 0 || V <= 0) DK_ABORT("ops_sample: bad shape n=%d V=%d", n, V);
    for (int r = 0; r < n; r++) sample_row(&tokens[r], &logprob[r], logits + (size_t)r * V, &params[r], V, r);
}
