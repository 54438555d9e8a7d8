/* kgprof.c: a small CUPTI activity recorder for KernelGym's profiler.
 *
 * Loaded with ctypes into the sandboxed evaluation child
 * (env/harness/profiler.py). Between kgprof_start() and kgprof_stop() every
 * kernel the process runs is recorded with its name, CUPTI stream id, start
 * and end timestamps (ns) and correlation id, through the CONCURRENT_KERNEL
 * activity kind (which, unlike KERNEL, does not serialise kernels). CUPTI
 * hands records back in buffers we allocate; they are parsed in the
 * buffer-completed callback and copied into a growing array, so a record
 * stays valid after CUPTI reuses its buffer.
 *
 * Attribution by identity: the harness calls kgprof_push_candidate() before
 * each of the candidate's own Triton launches and kgprof_pop() after it.
 * CUPTI then ties the correlation id of every API call made in between to
 * our external id (EXTERNAL_CORRELATION records), and a kernel record is the
 * candidate's when its correlation id is one of those, whatever its name.
 *
 * Errors are returned as non-zero codes with the text in kgprof_error():
 * this runs inside Python, so it never prints or exits.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign under -std=c11 */
#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KGPROF_NAME_LEN 512
#define KGPROF_BUFFER_BYTES (8u << 20)
#define KGPROF_ALIGN 8
/* The external correlation id marking the candidate's own launches. */
#define KGPROF_CANDIDATE_ID 0x6b6763616e64ULL

/* Kernel activity record layout of the CUPTI headers in use. */
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kgprof_kernel_activity;
#else
typedef CUpti_ActivityKernel9 kgprof_kernel_activity;
#endif

/* One kernel, as the harness reads it (mirrored by _Record in profiler.py). */
typedef struct {
    char name[KGPROF_NAME_LEN];
    uint32_t stream_id;
    uint32_t correlation;
    uint32_t device;
    uint32_t candidate; /* launched inside kgprof_push_candidate / kgprof_pop */
    uint64_t start_ns;
    uint64_t end_ns;
} kgprof_record;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static kgprof_record *g_records;
static int g_count, g_cap;
static uint64_t g_dropped;
static int g_registered;
static uint32_t *g_cand; /* correlation ids of the candidate's launches */
static int g_cand_n, g_cand_cap;
static int g_external; /* EXTERNAL_CORRELATION records are on */
static char g_error[256];

static int kgprof_fail(const char *what, CUptiResult r) {
    const char *text = "unknown error";
    cuptiGetResultString(r, &text);
    snprintf(g_error, sizeof g_error, "%s: %s (CUPTI %d)", what, text, (int)r);
    return (int)r == 0 ? -1 : (int)r;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *b = NULL;
    if (posix_memalign((void **)&b, KGPROF_ALIGN, KGPROF_BUFFER_BYTES) != 0) b = NULL;
    *buffer = b;
    *size = b ? KGPROF_BUFFER_BYTES : 0;
    *max_records = 0;
}

static void append_kernel(const kgprof_kernel_activity *k) {
    if (g_count == g_cap) {
        int cap = g_cap ? 2 * g_cap : 1024;
        kgprof_record *grown = realloc(g_records, (size_t)cap * sizeof *grown);
        if (!grown) {
            g_dropped++;
            return;
        }
        g_records = grown;
        g_cap = cap;
    }
    kgprof_record *r = &g_records[g_count++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", k->name ? k->name : "?");
    r->stream_id = k->streamId;
    r->correlation = k->correlationId;
    r->device = k->deviceId;
    r->start_ns = k->start;
    r->end_ns = k->end;
}

static void append_candidate(const CUpti_ActivityExternalCorrelation *x) {
    if (x->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 || x->externalId != KGPROF_CANDIDATE_ID) return;
    if (g_cand_n == g_cand_cap) {
        int cap = g_cand_cap ? 2 * g_cand_cap : 1024;
        uint32_t *grown = realloc(g_cand, (size_t)cap * sizeof *grown);
        if (!grown) {
            g_dropped++;
            return;
        }
        g_cand = grown;
        g_cand_cap = cap;
    }
    g_cand[g_cand_n++] = x->correlationId;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                      size_t valid_size) {
    (void)ctx;
    (void)stream_id;
    (void)size;
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&g_lock);
    while (cuptiActivityGetNextRecord(buffer, valid_size, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL)
            append_kernel((const kgprof_kernel_activity *)rec);
        else if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)
            append_candidate((const CUpti_ActivityExternalCorrelation *)rec);
    }
    pthread_mutex_unlock(&g_lock);
    free(buffer);
}

/* Clears earlier records and starts recording kernels. */
int kgprof_start(void) {
    CUptiResult r;
    if (!g_registered) {
        r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
        if (r != CUPTI_SUCCESS) return kgprof_fail("cuptiActivityRegisterCallbacks", r);
        g_registered = 1;
    }
    pthread_mutex_lock(&g_lock);
    g_count = 0;
    g_cand_n = 0;
    g_dropped = 0;
    pthread_mutex_unlock(&g_lock);
    r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) return kgprof_fail("cuptiActivityEnable(CONCURRENT_KERNEL)", r);
    /* External correlation records are made for driver API calls: both on,
     * or attribution falls back to names (kgprof_attribution() says so). */
    g_external = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) == CUPTI_SUCCESS &&
                 cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) == CUPTI_SUCCESS;
    return 0;
}

/* 1 when kernels are attributed by correlation id, 0 when by name only. */
int kgprof_attribution(void) { return g_external; }

/* Around one of the candidate's own launches (same thread). */
int kgprof_push_candidate(void) {
    if (!g_external) return 0;
    CUptiResult r = cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, KGPROF_CANDIDATE_ID);
    return r == CUPTI_SUCCESS ? 0 : kgprof_fail("cuptiActivityPushExternalCorrelationId", r);
}

int kgprof_pop(void) {
    if (!g_external) return 0;
    uint64_t id = 0;
    CUptiResult r = cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
    return r == CUPTI_SUCCESS ? 0 : kgprof_fail("cuptiActivityPopExternalCorrelationId", r);
}

/* Stops recording and flushes every pending buffer into the record array.
 * The caller synchronises the device first so all kernels have finished. */
int kgprof_stop(void) {
    CUptiResult r = cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) return kgprof_fail("cuptiActivityDisable(CONCURRENT_KERNEL)", r);
    if (g_external) {
        cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
        cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
    }
    r = cuptiActivityFlushAll(1);
    if (r != CUPTI_SUCCESS) return kgprof_fail("cuptiActivityFlushAll", r);
    return 0;
}

int kgprof_count(void) {
    pthread_mutex_lock(&g_lock);
    int n = g_count;
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* Copies record i (in completion order) into *out; -1 if i is out of range. */
int kgprof_get(int i, kgprof_record *out) {
    int rc = 0;
    pthread_mutex_lock(&g_lock);
    if (i < 0 || i >= g_count || !out) {
        snprintf(g_error, sizeof g_error, "record %d out of range (have %d)", i, g_count);
        rc = -1;
    } else {
        *out = g_records[i];
        out->candidate = 0;
        for (int j = 0; j < g_cand_n && !out->candidate; j++) out->candidate = g_cand[j] == out->correlation;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Records lost because memory for them could not be allocated. */
uint64_t kgprof_dropped(void) {
    pthread_mutex_lock(&g_lock);
    uint64_t n = g_dropped;
    pthread_mutex_unlock(&g_lock);
    return n;
}

const char *kgprof_error(void) { return g_error; }
