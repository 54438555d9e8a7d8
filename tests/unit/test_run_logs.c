/* test_run_logs.c: the pieces under crash-safe logs, against hand-made cases:
 *   - dk_utf8_seq_len / dk_utf8_sanitize on every kind of ill-formed bytes;
 *   - metrics_add_str escapes quotes, control bytes and bad UTF-8;
 *   - run_logs_mark + run_logs_resume cut both logs to the recorded sizes,
 *     and without a record keep the complete lines of steps <= S;
 *   - run_logs_resume(0) empties both logs and forgets the sizes. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"
#include "common/utf8.h"
#include "common/util.h"
#include "trainer/metrics.h"
#include "trainer/run_logs.h"

static char *slurp(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = NULL;
    size_t len = 0;
    if (dk_read_file(path, &text, &len) != DK_OK) return dk_strdup("<missing>");
    return text;
}

static void put(const char *dir, const char *name, const char *text, const char *mode) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, mode);
    fputs(text, f);
    fclose(f);
}

static void test_utf8(void) {
    const struct {
        const char *in;
        int len;
    } seq[] = {
        {"A", 1},           {"\xC3\xA9", 2},     {"\xE2\x82\xAC", 3}, {"\xF0\x9F\x98\x80", 4},
        {"\xC0\xAF", 0},    /* overlong '/' */    {"\xE0\x80\xAF", 0}, /* overlong, 3 bytes */
        {"\xED\xA0\x80", 0}, /* surrogate */      {"\xF4\x90\x80\x80", 0}, /* past U+10FFFF */
        {"\x80", 0},        /* lone continuation */ {"\xE2\x82", 0},   /* cut */
        {"\xFF", 0},
    };
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        int got = dk_utf8_seq_len((const unsigned char *)seq[i].in, strlen(seq[i].in));
        CHECK(got == seq[i].len, "case %zu: length %d, want %d", i, got, seq[i].len);
    }
    size_t bad = 0;
    const char in[] = "ok \xE2\x82 \xC3\xA9\xFF!";
    char *s = dk_utf8_sanitize(in, sizeof in - 1, &bad);
    CHECK(!strcmp(s, "ok \xEF\xBF\xBD\xEF\xBF\xBD \xC3\xA9\xEF\xBF\xBD!"), "sanitised to '%s'", s);
    CHECK(bad == 3, "%zu bad bytes, want 3", bad);
    free(s);
    const char nul[] = {'a', 0, 'b'};
    s = dk_utf8_sanitize(nul, 3, &bad);
    CHECK(!strcmp(s, "a\xEF\xBF\xBD" "b") && bad == 1, "NUL replaced: '%s'", s);
    free(s);
}

static void test_metrics_str(const char *dir) {
    metrics_log m;
    CHECK(metrics_open(&m, dir) == DK_OK, "%s", dk_error());
    metrics_begin(&m, 1);
    metrics_add_str(&m, "s", "a\"b\\c\nd\x01\xFF");
    metrics_end(&m);
    metrics_close(&m);
    char *text = slurp(dir, "metrics.jsonl");
    CHECK(!strcmp(text, "{\"step\":1,\"s\":\"a\\\"b\\\\c\\u000ad\\u0001\xEF\xBF\xBD\"}\n"), "line '%s'", text);
    free(text);
}

static void test_cut(const char *dir) {
    CHECK(run_logs_resume(dir, 0) == DK_OK, "%s", dk_error());
    char *t = slurp(dir, "metrics.jsonl");
    CHECK(!strcmp(t, ""), "fresh start leaves '%s'", t);
    free(t);
    put(dir, "metrics.jsonl", "{\"step\":1,\"x\":1}\n{\"step\":2,\"x\":2}\n", "w");
    put(dir, "rollouts.jsonl", "{\"step\":1,\"r\":\"a\"}\n{\"step\":2,\"r\":\"b\"}\n", "w");
    CHECK(run_logs_mark(dir, 2) == DK_OK, "%s", dk_error());
    /* Steps 3 and 4 logged, a kill in the middle of step 5's line. */
    put(dir, "metrics.jsonl", "{\"step\":3,\"x\":3}\n{\"step\":4,\"x\":4}\n{\"step\":5,\"x", "a");
    put(dir, "rollouts.jsonl", "{\"step\":3,\"r\":\"c\"}\n{\"step\":4,\"r\":\"d\"}\n", "a");
    CHECK(run_logs_mark(dir, 4) == DK_OK, "%s", dk_error());
    CHECK(run_logs_resume(dir, 2) == DK_OK, "%s", dk_error());
    t = slurp(dir, "metrics.jsonl");
    CHECK(!strcmp(t, "{\"step\":1,\"x\":1}\n{\"step\":2,\"x\":2}\n"), "metrics cut to '%s'", t);
    free(t);
    t = slurp(dir, "rollouts.jsonl");
    CHECK(!strcmp(t, "{\"step\":1,\"r\":\"a\"}\n{\"step\":2,\"r\":\"b\"}\n"), "rollouts cut to '%s'", t);
    free(t);
    t = slurp(dir, "logs_offsets.json");
    CHECK(!strcmp(t, "{\"2\":{\"metrics.jsonl\":34,\"rollouts.jsonl\":38}}"), "offsets '%s' (step 4 forgotten)", t);
    free(t);
    /* No record for step 3: lines are kept by their step, the half line dropped. */
    put(dir, "metrics.jsonl", "{\"step\":3,\"x\":3}\n{\"step\":4,\"x\":4}\n{\"step\":5,\"x", "a");
    CHECK(run_logs_resume(dir, 3) == DK_OK, "%s", dk_error());
    t = slurp(dir, "metrics.jsonl");
    CHECK(!strcmp(t, "{\"step\":1,\"x\":1}\n{\"step\":2,\"x\":2}\n{\"step\":3,\"x\":3}\n"), "metrics by step '%s'", t);
    free(t);
    /* A log shorter than its record (emptied by hand): kept by step, a warning. */
    put(dir, "rollouts.jsonl", "{\"step\":1,\"r\":\"a\"}\n", "w");
    CHECK(run_logs_resume(dir, 2) == DK_OK, "%s", dk_error());
    t = slurp(dir, "rollouts.jsonl");
    CHECK(!strcmp(t, "{\"step\":1,\"r\":\"a\"}\n"), "short rollouts '%s'", t);
    free(t);
    CHECK(run_logs_resume(dir, 0) == DK_OK, "%s", dk_error());
    char path[512];
    snprintf(path, sizeof path, "%s/logs_offsets.json", dir);
    CHECK(!dk_file_exists(path), "a fresh start keeps %s", path);
    t = slurp(dir, "rollouts.jsonl");
    CHECK(!strcmp(t, ""), "fresh start leaves rollouts '%s'", t);
    free(t);
    put(dir, "logs_offsets.json", "[1,2]", "w");
    CHECK(run_logs_resume(dir, 2) == DK_ERR_RUNTIME && strstr(dk_error(), "logs_offsets.json: not a JSON object"),
          "corrupt offsets: '%s'", dk_error());
}

int main(void) {
    char dir[] = "/tmp/dk_run_logs_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_utf8();
    test_metrics_str(dir);
    test_cut(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return check_report();
}
