/* tensorboard.c: the two layers of an event file, written by hand.
 * Protobuf: a field is a varint key (field_number << 3 | wire_type) and a
 * payload: wire type 0 = varint, 1 = 8 little-endian bytes, 2 = varint
 * length + bytes (strings and nested messages), 5 = 4 little-endian bytes.
 * TFRecord: uint64 length, masked crc32c(length), data, masked crc32c(data),
 * all little-endian; crc32c is CRC-32 with the Castagnoli polynomial. */
#define _POSIX_C_SOURCE 200809L
#include "trainer/tensorboard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

/* Field keys of tensorflow/core/util/event.proto and framework/summary.proto. */
enum {
    EVENT_WALL_TIME = 1 << 3 | 1,    /* double */
    EVENT_STEP = 2 << 3 | 0,         /* int64 */
    EVENT_FILE_VERSION = 3 << 3 | 2, /* string */
    EVENT_SUMMARY = 5 << 3 | 2,      /* Summary */
    SUMMARY_VALUE = 1 << 3 | 2,      /* repeated Summary.Value */
    VALUE_TAG = 1 << 3 | 2,          /* string */
    VALUE_SIMPLE_VALUE = 2 << 3 | 5, /* float */
};

/* Bitwise rather than table-driven: records are tens of bytes, a few per step. */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

/* TFRecord masks its CRCs so that a CRC of data that itself holds CRCs stays strong. */
static uint32_t masked_crc(const uint8_t *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

static uint8_t *put_bytes(uint8_t *p, int key, const void *s, size_t n) {
    p = put_varint(p, (uint64_t)key);
    p = put_varint(p, n);
    memcpy(p, s, n);
    return p + n;
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Writes the Event prefix every record shares: wall_time and step. */
static uint8_t *put_event_head(uint8_t *p, int64_t step) {
    double t = wall_time();
    uint64_t bits;
    memcpy(&bits, &t, sizeof bits);
    p = put_varint(p, EVENT_WALL_TIME);
    p = put_le(p, bits, 8);
    p = put_varint(p, EVENT_STEP);
    return put_varint(p, (uint64_t)step); /* a negative int64 takes 10 bytes, as protobuf says */
}

static void write_record(tb_writer *w, const uint8_t *data, size_t n) {
    if (!w->f || w->err) return;
    uint8_t head[12], tail[4];
    put_le(head, n, 8);
    put_le(head + 8, masked_crc(head, 8), 4);
    put_le(tail, masked_crc(data, n), 4);
    errno = 0;
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head || fwrite(data, 1, n, w->f) != n ||
        fwrite(tail, 1, sizeof tail, w->f) != sizeof tail)
        w->err = errno ? errno : EIO;
}

dk_status tb_open(tb_writer *w, const char *logdir) {
    memset(w, 0, sizeof *w);
    DK_TRY(dk_mkdirs(logdir));
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0 || !host[0]) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    long now = (long)time(NULL);
    /* "x": never clobber the file of another writer opened in the same second. */
    for (int i = 0; !w->f; i++) {
        int len = i == 0 ? snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s", logdir, now, host)
                         : snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s.%d", logdir, now, host, i);
        if (len >= (int)sizeof w->path) return dk_fail(DK_ERR_RUNTIME, "%s: tensorboard log directory path too long", logdir);
        w->f = fopen(w->path, "wbx");
        if (!w->f && (errno != EEXIST || i >= 1000))
            return dk_fail(DK_ERR_RUNTIME, "%s: cannot create event file: %s", w->path, strerror(errno));
    }
    static const char version[] = "brain.Event:2";
    uint8_t buf[64];
    uint8_t *p = put_event_head(buf, 0);
    p = put_bytes(p, EVENT_FILE_VERSION, version, strlen(version));
    write_record(w, buf, (size_t)(p - buf));
    dk_status s = tb_flush(w);
    if (s != DK_OK) tb_close(w);
    return s;
}

void tb_scalar(tb_writer *w, const char *tag, int64_t step, double value) {
    if (!w->f || w->err) return;
    size_t tag_len = strlen(tag);
    size_t value_len = 1 + varint_size(tag_len) + tag_len + 1 + 4;
    size_t summary_len = 1 + varint_size(value_len) + value_len;
    uint8_t *buf = dk_malloc(32 + varint_size(summary_len) + summary_len);
    float v = (float)value; /* simple_value is a float; the cast keeps NaN and inf */
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint8_t *p = put_event_head(buf, step);
    p = put_varint(p, EVENT_SUMMARY);
    p = put_varint(p, summary_len);
    p = put_varint(p, SUMMARY_VALUE);
    p = put_varint(p, value_len);
    p = put_bytes(p, VALUE_TAG, tag, tag_len);
    p = put_varint(p, VALUE_SIMPLE_VALUE);
    p = put_le(p, bits, 4);
    write_record(w, buf, (size_t)(p - buf));
    free(buf);
}

dk_status tb_flush(tb_writer *w) {
    errno = 0;
    if (w->f && !w->err && fflush(w->f) != 0) w->err = errno ? errno : EIO;
    if (w->err) return dk_fail(DK_ERR_RUNTIME, "%s: write failed: %s", w->path, strerror(w->err));
    return DK_OK;
}

dk_status tb_close(tb_writer *w) {
    if (!w->f) return DK_OK;
    dk_status s = tb_flush(w);
    int closed = fclose(w->f) == 0;
    w->f = NULL;
    if (s == DK_OK && !closed) s = dk_fail(DK_ERR_RUNTIME, "%s: close failed: %s", w->path, strerror(errno));
    return s;
}
