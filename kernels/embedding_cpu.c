/* embedding_cpu.c: token embedding lookup and its gradient. The backward is a
 * scatter-add that visits tokens in order, so repeated ids are summed in a
 * fixed order and the result is deterministic. The op is not told the
 * vocabulary size, so only negative ids can be caught here; the data layer
 * checks ids against the vocabulary. */
#include <string.h>

#include "kernels/ops_cpu.h"

void cpu_embedding_forward(ops_ctx *ctx, void *out_, const int32_t *ids, const void *table_, int T, int C) {
    float *out = out_;
    const float *table = table_;
    for (int t = 0; t < T; t++) {
        if (ids[t] < 0) DK_ABORT("ops_embedding_forward: token %d has negative id %d", t, (int)ids[t]);
        memcpy(out + (size_t)t * C, table + (size_t)ids[t] * C, (size_t)C * sizeof(float));
    }
}

void cpu_embedding_backward(ops_ctx *ctx, float *dtable, const void *dout_, const int32_t *ids, int T, int C) {
    const float *dout = dout_;
    for (int t = 0; t < T; t++) {
        if (ids[t] < 0) DK_ABORT("ops_embedding_backward: token %d has negative id %d", t, (int)ids[t]);
        float *row = dtable + (size_t)ids[t] * C;
        const float *g = dout + (size_t)t * C;
        for (int c = 0; c < C; c++) row[c] += g[c];
    }
}
