/* ckpt_reshard.c: the program tests/mpi/test_ckpt_reshard.sh runs under
 * mpirun. It plays the ZeRO-3 side of trainer/ckpt_shards.h for a tiny model
 * (fixture shapes; qwen3: untied head, q/k norm; qwen2: tied, biases): every
 * value of the fp32 masters, m and v is a hash of (array, unit, element), so
 * any rank at any world size knows the whole state without holding it.
 *
 *   ckpt_reshard save ARCH RUN_DIR       every rank hands its slices to
 *                                        ckpt_save_shards (step 7)
 *   ckpt_reshard load ARCH CKPT_DIR      every rank loads its slices at this
 *                                        world size and checks each value bit
 *                                        for bit; it also reads its slices of
 *                                        the bf16 weights back through the
 *                                        HF range reader
 *   ckpt_reshard hf ARCH DIR             every rank starts from the HF files
 *                                        in DIR (ckpt_shards_init_from_hf) and
 *                                        checks its slices: the bf16 masters,
 *                                        m and v zero
 *   ckpt_reshard single ARCH DIR         one process writes the same weights
 *                                        with weights_save_hf (the reference
 *                                        the sharded files must equal byte
 *                                        for byte); `one` writes them as one
 *                                        model.safetensors
 * MPI_Barrier and an MPI_Allreduce of a flag are the callbacks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "dist/shard.h"
#include "model/param_buffers.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "model/weights_shards.h"
#include "tests/fixture_models.h"
#include "trainer/checkpoint.h"

#define STEP 7
#define OPT_T 7
#define SHARD_BYTES 3000 /* several HF files for the tiny model */

static int g_rank, g_world;

/* Element I of array A (0 master, 1 m, 2 v) of unit U: a full-precision float. */
static float value(int a, int u, size_t i) {
    uint64_t x = ((uint64_t)a << 60) ^ ((uint64_t)u << 40) ^ (uint64_t)i;
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    float f = (float)(int32_t)(x >> 32) * 0x1p-31f;
    return a == 2 ? f * f : f; /* v is never negative */
}

typedef struct {
    size_t values, puts;
    int bad;
    int from_hf; /* expect the bf16 weights as masters and zero moments */
} check_state;

static dk_status get(void *ctx, int u, size_t b, size_t e, float *ma, float *m, float *v) {
    for (size_t i = b; i < e; i++) {
        ma[i - b] = value(0, u, i);
        m[i - b] = value(1, u, i);
        v[i - b] = value(2, u, i);
    }
    return DK_OK;
}

static dk_status put(void *ctx, int u, size_t b, size_t e, const float *ma, const float *m, const float *v) {
    check_state *cs = ctx;
    cs->puts++;
    for (size_t i = b; i < e; i++) {
        float want[3] = {value(0, u, i), value(1, u, i), value(2, u, i)};
        const float got[3] = {ma[i - b], m[i - b], v[i - b]};
        if (cs->from_hf) {
            want[0] = st_bf16_to_f32(st_f32_to_bf16(want[0]));
            want[1] = want[2] = 0.0f;
        }
        for (int a = 0; a < 3; a++)
            if (memcmp(&want[a], &got[a], 4) != 0 && cs->bad++ < 5)
                fprintf(stderr, "rank %d: unit %d element %zu array %d: got %a, saved %a\n", g_rank, u, i, a, got[a],
                        want[a]);
        cs->values++;
    }
    return DK_OK;
}

static void barrier(void *ctx) { MPI_Barrier(MPI_COMM_WORLD); }

static int all_ok(void *ctx, int ok) {
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

static void must(dk_status s, const char *what) {
    if (s != DK_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, dk_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* Every slice of this rank through the HF range reader: the bf16 rounding of
 * the saved master. */
static int check_hf(const char *dir, const model_config *c, const param_layout *pl) {
    weights_reader w;
    must(weights_reader_open(&w, dir, c, pl), "opening the HF weights");
    int bad = 0;
    for (int u = 0; u < weights_n_units(c); u++) {
        size_t b, e;
        shard_range(weights_unit_size(c, pl, u), g_world, g_rank, &b, &e);
        float *got = dk_malloc((e - b + 1) * sizeof *got);
        must(weights_reader_read(&w, u, b, e - b, got), "reading a unit range");
        for (size_t i = b; i < e; i++) {
            float want = st_bf16_to_f32(st_f32_to_bf16(value(0, u, i)));
            if (memcmp(&want, &got[i - b], 4) != 0 && bad++ < 5)
                fprintf(stderr, "rank %d: HF unit %d element %zu: got %a, want %a\n", g_rank, u, i, got[i - b], want);
        }
        free(got);
    }
    weights_reader_close(&w);
    return bad;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    if (argc != 4) {
        if (g_rank == 0) fprintf(stderr, "usage: ckpt_reshard save|load|hf|single|one qwen3|qwen2 DIR\n");
        MPI_Finalize();
        return 2;
    }
    const char *mode = argv[1], *dir = argv[3];
    dk_arch arch;
    must(model_arch_parse(argv[2], &arch), "arch");
    model_config c = fixture_model_config(arch);
    param_layout pl;
    param_layout_init(&pl, &c);
    check_state cs = {0, 0, 0, !strcmp(mode, "hf")};
    ckpt_shards_io io = {g_world, g_rank, &cs, get, put, barrier, all_ok};
    int rc = 0;
    if (!strcmp(mode, "save")) {
        dk_config cfg;
        config_defaults(&cfg);
        snprintf(cfg.run.dir, sizeof cfg.run.dir, "%s", dir);
        ckpt_state st = {STEP, 123, 1, g_world};
        must(ckpt_save_shards(dir, &c, &pl, OPT_T, &io, &cfg, &st, 0, SHARD_BYTES), "ckpt_save_shards");
        if (g_rank == 0) printf("saved step %d at world %d\n", STEP, g_world);
    } else if (!strcmp(mode, "load") || !strcmp(mode, "hf")) {
        ckpt_state st = {STEP, 0, 0, 0};
        int t = OPT_T;
        if (cs.from_hf) must(ckpt_shards_init_from_hf(dir, &c, &pl, &io), "ckpt_shards_init_from_hf");
        else must(ckpt_load_shards(dir, &c, &pl, &io, &st, &t), "ckpt_load_shards");
        size_t want = 0, want_puts = 0;
        for (int u = 0; u < weights_n_units(&c); u++) {
            size_t b, e;
            shard_range(weights_unit_size(&c, &pl, u), g_world, g_rank, &b, &e);
            want += e - b;
            want_puts += b < e;
        }
        int bad = cs.bad + (cs.from_hf ? 0 : check_hf(dir, &c, &pl));
        if (st.step != STEP || t != OPT_T || cs.values != want || cs.puts != want_puts) {
            fprintf(stderr, "rank %d: step %d (want %d), optimizer t %d (want %d), %zu values in %zu puts (want %zu in %zu)\n",
                    g_rank, st.step, STEP, t, OPT_T, cs.values, cs.puts, want, want_puts);
            bad++;
        }
        int all = all_ok(NULL, bad == 0);
        if (g_rank == 0 && cs.from_hf)
            printf("started from %s at world %d: %s\n", dir, g_world, all ? "bit-identical" : "MISMATCH");
        else if (g_rank == 0)
            printf("loaded %s (world %d) at world %d: %s\n", dir, st.world_size, g_world,
                   all ? "bit-identical" : "MISMATCH");
        rc = all ? 0 : 1;
    } else if (!strcmp(mode, "single") || !strcmp(mode, "one")) {
        param_buffers host;
        param_buffers_alloc_host(&host, &pl, c.n_layers, c.tie_embeddings, sizeof(float));
        for (int u = 0; u < weights_n_units(&c); u++) {
            float *p = weights_unit_ptr(&c, &host, u);
            for (size_t i = 0; i < weights_unit_size(&c, &pl, u); i++) p[i] = value(0, u, i);
        }
        size_t limit = !strcmp(mode, "one") ? 0 : SHARD_BYTES;
        must(weights_save_hf(dir, &c, &pl, &host, "bf16", limit), "weights_save_hf");
        param_buffers_free_host(&host);
    } else {
        fprintf(stderr, "unknown mode '%s'\n", mode);
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
