/* test_tensorboard.c: the event-file writer of trainer/tensorboard.c.
 * Without arguments: the bytes of a scalar Event against a hand-encoded
 * protobuf (one-byte and ten-byte step varints, a 200-byte tag whose lengths
 * need two-byte varints), the TFRecord length header, the file name, two
 * writers in one second, and the errors (bad directory, failed write).
 * With --emit DIR: writes the scalars that test_tensorboard_read.py reads back
 * with TensorBoard and an independent CRC/protobuf parser, and lists them on
 * stdout as "tag<TAB>step<TAB>value". */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "trainer/tensorboard.h"
#include "tests/check.h"

static void emit(tb_writer *w, const char *tag, int64_t step, double v) {
    tb_scalar(w, tag, step, v);
    printf("%s\t%lld\t%.17g\n", tag, (long long)step, v);
}

static int emit_all(const char *dir) {
    tb_writer w;
    if (tb_open(&w, dir) != DK_OK) {
        fprintf(stderr, "%s\n", dk_error());
        return 1;
    }
    char long_tag[201];
    memset(long_tag, 'x', 200);
    memcpy(long_tag, "long/", 5);
    long_tag[200] = 0;
    for (int s = 0; s < 40; s++) {
        emit(&w, "loss/policy", s, sin(0.3 * s) * s);
        emit(&w, "reward/mean", 2 * s, 0.1 + 0.01 * s);
        emit(&w, "lr", s, 1e-6 * s);
        if (s % 10 == 0) emit(&w, long_tag, s, -s);
    }
    const double special[] = {1.5, NAN, INFINITY, -INFINITY, 1e-45, 3e38, -0.0, 1e40, 7.25};
    const int64_t steps[] = {-5, 0, 1, 2, 3, 4, 5, 6, (int64_t)1 << 40};
    for (int i = 0; i < 9; i++) emit(&w, "special/\xc3\xa9t\xc3\xa9", steps[i], special[i]);
    dk_status s = tb_close(&w);
    if (s != DK_OK) fprintf(stderr, "%s\n", dk_error());
    return s == DK_OK ? 0 : 1;
}

/* Reads the records of an event file; returns how many, data copied into recs. */
static int read_records(const char *path, uint8_t recs[][512], size_t *lens, int max) {
    char *buf;
    size_t len;
    if (dk_read_file(path, &buf, &len) != DK_OK) return -1;
    int n = 0;
    size_t off = 0;
    while (off + 12 <= len && n < max) {
        uint64_t rl = 0;
        for (int i = 0; i < 8; i++) rl |= (uint64_t)(uint8_t)buf[off + i] << (8 * i);
        if (rl > 512 || off + 12 + rl + 4 > len) break;
        memcpy(recs[n], buf + off + 12, rl);
        lens[n++] = rl;
        off += 12 + rl + 4;
    }
    CHECK(off == len, "%s: %zu trailing bytes after %d records", path, len - off, n);
    free(buf);
    return n;
}

static int find_event_files(const char *dir, char names[][256], int max) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "events.out.tfevents.", 20) && n < max) snprintf(names[n++], 256, "%s", e->d_name);
    if (d) closedir(d);
    return n;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--emit")) return emit_all(argv[2]);

    char dir[] = "/tmp/dk_tb_XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp");
    char logdir[512];
    snprintf(logdir, sizeof logdir, "%s/run/tb", dir); /* does not exist yet: tb_open makes it */

    long t_before = (long)time(NULL);
    tb_writer w;
    dk_status s = tb_open(&w, logdir);
    CHECK(s == DK_OK, "tb_open: %s", dk_error());
    char tag200[201];
    memset(tag200, 'q', 200);
    tag200[200] = 0;
    tb_scalar(&w, "a", 1, 0.5);
    tb_scalar(&w, "b", -1, -2.0);
    tb_scalar(&w, tag200, 300, 1.0);
    CHECK(tb_flush(&w) == DK_OK, "tb_flush: %s", dk_error());
    CHECK(tb_close(&w) == DK_OK, "tb_close: %s", dk_error());
    long t_after = (long)time(NULL);

    /* The name: events.out.tfevents.<unix time>.<hostname> */
    char names[4][256], host[256] = "";
    gethostname(host, sizeof host);
    CHECK(find_event_files(logdir, names, 4) == 1, "expected one event file in %s", logdir);
    long t_name = 0;
    char host_name[256] = "";
    CHECK(sscanf(names[0], "events.out.tfevents.%ld.%255s", &t_name, host_name) == 2, "file name %s", names[0]);
    CHECK(t_name >= t_before - 1 && t_name <= t_after + 1, "time in name %ld not in [%ld, %ld]", t_name, t_before - 1,
          t_after + 1);
    CHECK(!strcmp(host_name, host), "host in name '%s', gethostname '%s'", host_name, host);

    static uint8_t recs[8][512];
    size_t lens[8];
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", logdir, names[0]);
    int n = read_records(path, recs, lens, 8);
    CHECK(n == 4, "%d records, expected 4", n);

    /* Record 0: wall_time, step 0, file_version "brain.Event:2". */
    static const uint8_t ver[] = {0x10, 0x00, 0x1a, 13, 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};
    CHECK(lens[0] == 9 + sizeof ver && recs[0][0] == 0x09 && !memcmp(recs[0] + 9, ver, sizeof ver),
          "file_version record differs (%zu bytes)", lens[0]);
    double wt;
    memcpy(&wt, recs[0] + 1, 8);
    /* time() reads a coarse clock that can trail the precise one by a tick
     * across a second boundary: allow a second on each side. */
    CHECK(wt >= t_before - 1 && wt < t_after + 2, "wall_time %.3f not in [%ld, %ld]", wt, t_before - 1, t_after + 2);

    /* Record 1: step 1, Summary{Value{tag "a", simple_value 0.5f = 0x3f000000}}. */
    static const uint8_t a[] = {0x10, 0x01, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 'a', 0x15, 0x00, 0x00, 0x00, 0x3f};
    CHECK(lens[1] == 9 + sizeof a && !memcmp(recs[1] + 9, a, sizeof a), "scalar 'a' record differs");
    /* Record 2: step -1 is the ten-byte varint of 2^64 - 1; -2.0f = 0xc0000000. */
    static const uint8_t b[] = {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x2a, 0x0a,
                                0x0a, 0x08, 0x0a, 0x01, 'b',  0x15, 0x00, 0x00, 0x00, 0xc0};
    CHECK(lens[2] == 9 + sizeof b && !memcmp(recs[2] + 9, b, sizeof b), "scalar 'b' record differs");
    /* Record 3: step 300 = ac 02; Value = 0a c8 01 <200> 15 <4> = 208 bytes = d0 01;
     * Summary = 0a d0 01 <208> = 211 bytes = d3 01; 1.0f = 0x3f800000. */
    static const uint8_t c_head[] = {0x10, 0xac, 0x02, 0x2a, 0xd3, 0x01, 0x0a, 0xd0, 0x01, 0x0a, 0xc8, 0x01};
    static const uint8_t c_tail[] = {0x15, 0x00, 0x00, 0x80, 0x3f};
    CHECK(lens[3] == 9 + sizeof c_head + 200 + sizeof c_tail && !memcmp(recs[3] + 9, c_head, sizeof c_head) &&
              !memcmp(recs[3] + 9 + sizeof c_head, tag200, 200) &&
              !memcmp(recs[3] + 9 + sizeof c_head + 200, c_tail, sizeof c_tail),
          "scalar with a 200-byte tag differs (%zu bytes)", lens[3]);

    /* Two writers opened in the same second must not share a file. */
    tb_writer w1, w2;
    CHECK(tb_open(&w1, logdir) == DK_OK && tb_open(&w2, logdir) == DK_OK, "second tb_open: %s", dk_error());
    CHECK(strcmp(w1.path, w2.path) != 0, "two writers got one file %s", w1.path);
    tb_close(&w1);
    tb_close(&w2);
    CHECK(find_event_files(logdir, names, 4) == 3, "expected three event files in %s", logdir);

    /* Errors name the path. */
    s = tb_open(&w, "/dev/null/tb");
    CHECK(s == DK_ERR_RUNTIME && strstr(dk_error(), "/dev/null"), "bad logdir: %d '%s'", s, dk_error());
    CHECK(tb_open(&w, logdir) == DK_OK, "tb_open: %s", dk_error());
    fclose(w.f);
    w.f = fopen("/dev/full", "wb"); /* every write failures with ENOSPC */
    if (w.f) {
        setvbuf(w.f, NULL, _IONBF, 0);
        tb_scalar(&w, "x", 1, 1.0);
        s = tb_flush(&w);
        CHECK(s == DK_ERR_RUNTIME && strstr(dk_error(), w.path), "failed write: %d '%s'", s, dk_error());
        CHECK(tb_close(&w) == DK_ERR_RUNTIME, "tb_close after a failed write must fail");
    }

    printf("tensorboard: %d records checked byte for byte, file %s\n", n, strrchr(path, '/') + 1);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
