/* test_kg_queue_units.c: the pieces under the KernelGym queue that need no
 * server: Redis URL parsing and redaction, the job JSON line, result parsing,
 * the id map, and the client's bookkeeping (results kept for later, waits
 * continued, ids already returned refused) in local mode with echo jobs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "env/client.h"
#include "env/redis_conn.h"
#include "env/strmap.h"
#include "tests/check.h"

static void url_ok(const char *url, int is_unix, const char *host_or_path, int port, const char *user, const char *pw, int db) {
    kg_redis_url u;
    dk_status st = kg_redis_url_parse(url, &u);
    CHECK(st == DK_OK, "%s: %s", url, dk_error());
    if (st != DK_OK) return;
    CHECK(u.is_unix == is_unix, "%s: unix %d", url, u.is_unix);
    CHECK(strcmp(is_unix ? u.path : u.host, host_or_path) == 0, "%s: host/path '%s'", url, is_unix ? u.path : u.host);
    if (!is_unix) CHECK(u.port == port, "%s: port %d", url, u.port);
    CHECK(strcmp(u.user, user) == 0, "%s: user '%s'", url, u.user);
    CHECK(strcmp(u.password, pw) == 0, "%s: password '%s'", url, u.password);
    CHECK(u.db == db, "%s: db %d", url, u.db);
}

static void url_bad(const char *url, const char *text) {
    kg_redis_url u;
    dk_status st = kg_redis_url_parse(url, &u);
    CHECK(st == DK_ERR_USAGE && strstr(dk_error(), text), "%s: expected a usage error with '%s', got %d '%s'", url, text, st,
          dk_error());
    CHECK(!strstr(dk_error(), "s3cret"), "%s: the message shows the password: %s", url, dk_error());
}

static void redact(const char *url, const char *want) {
    char out[512];
    kg_redis_url_redact(url, out, sizeof out);
    CHECK(strcmp(out, want) == 0, "redact %s: '%s', expected '%s'", url, out, want);
}

static void test_urls(void) {
    url_ok("redis://localhost", 0, "localhost", 6379, "", "", 0);
    url_ok("redis://10.0.0.5:6380/3", 0, "10.0.0.5", 6380, "", "", 3);
    url_ok("redis://:s3cret@host:7000", 0, "host", 7000, "", "s3cret", 0);
    url_ok("redis://alice:s3cret@host:7000/2", 0, "host", 7000, "alice", "s3cret", 2);
    url_ok("redis://:p%40ss%3Aword@host", 0, "host", 6379, "", "p@ss:word", 0);
    url_ok("redis://[::1]:6390", 0, "::1", 6390, "", "", 0);
    url_ok("redis://host?password=s3cret&db=4", 0, "host", 6379, "", "s3cret", 4);
    url_ok("unix:///tmp/kg/redis.sock", 1, "/tmp/kg/redis.sock", 0, "", "", 0);
    url_ok("unix:///tmp/kg/redis.sock?password=abc123&db=1", 1, "/tmp/kg/redis.sock", 0, "", "abc123", 1);
    url_ok("unix://:s3cret@/run/redis.sock", 1, "/run/redis.sock", 0, "", "s3cret", 0);
    url_bad("http://host:6379", "expected redis://");
    url_bad("redis://host:0", "port 0 out of range");
    url_bad("redis://host:abc", "bad port");
    url_bad("redis://:s3cret@", "empty host");
    url_bad("redis://host/x", "bad database number");
    url_bad("redis://host?passwd=s3cret", "unknown query parameter 'passwd'");
    url_bad("redis://:pw%zz@host", "bad percent escape in the password");
    url_bad("unix://relative.sock", "relative path");
    url_bad("rediss://host", "TLS");
    url_bad("", "empty");
    redact("redis://:s3cret@host:1", "redis://:***@host:1");
    redact("redis://bob:s3cret@host", "redis://bob:***@host");
    redact("unix:///x/r.sock?password=s3cret&db=2", "unix:///x/r.sock?password=***&db=2");
    redact("redis://host", "redis://host");
}

static void test_job_json(void) {
    kg_job j;
    kg_job_init(&j);
    cJSON *o = NULL;
    CHECK(kg_job_to_json(&j, "id-1", NULL, &o) == DK_ERR_USAGE && strstr(dk_error(), "task_source"),
          "an eval job without sources was accepted");
    j.task_source = "class Model: pass";
    j.candidate_source = "class ModelNew: pass";
    j.task_name = "19_Gemm_ReLU";
    j.opt.timeout_s = 30;
    j.opt.atol = 1e-3;
    CHECK(kg_job_to_json(&j, "id-2", "client-a", &o) == DK_OK, "job json: %s", dk_error());
    char *s = cJSON_PrintUnformatted(o);
    const char *want[] = {"\"id\":\"id-2\"", "\"kind\":\"eval\"", "\"client\":\"client-a\"", "\"task_name\":\"19_Gemm_ReLU\"",
                          "\"timeout_s\":30", "\"atol\":0.001", "\"rtol\":null", "\"reference_mode\":\"eager\"",
                          "\"correctness_trials\":5", "\"perf_trials\":100", "\"profile\":true", "\"strict\":false"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) CHECK(strstr(s, want[i]), "job json lacks %s: %s", want[i], s);
    free(s);
    cJSON_Delete(o);
    j.opt.timeout_s = 0;
    CHECK(kg_job_to_json(&j, "id-3", NULL, &o) == DK_ERR_USAGE && strstr(dk_error(), "timeout_s"), "timeout 0 accepted");
}

static void test_result_parse(void) {
    kg_result r;
    kg_result_init(&r);
    CHECK(kg_result_parse("{\"status\":\"fast\"}", &r) != DK_OK && strstr(dk_error(), "'fast'"), "unknown status accepted");
    CHECK(kg_result_parse("{\"compiled\":true}", &r) != DK_OK && strstr(dk_error(), "status"), "missing status accepted");
    CHECK(kg_result_parse("not json", &r) != DK_OK, "garbage accepted");
    const char *j = "{\"id\":\"a-1\",\"status\":\"ok\",\"compiled\":true,\"correct\":true,"
                    "\"hack\":{\"detected\":false,\"reasons\":[]},\"max_abs_diff\":2.5e-05,"
                    "\"runtime_ms\":{\"mean\":2,\"median\":1.9,\"std\":0.1,\"min\":1.8,\"max\":2.4,\"trials\":50},"
                    "\"ref_runtime_ms\":{\"mean\":3,\"median\":3,\"std\":0,\"min\":3,\"max\":3,\"trials\":50},"
                    "\"speedup\":1.5,\"timing_available\":true,"
                    "\"profile\":{\"kernels\":[{\"name\":\"k\",\"time_us\":10,\"calls\":2,\"candidate\":true}],"
                    "\"coverage\":0.9,\"side_streams\":true},\"reward\":1.32,\"feedback\":\"fb\",\"worker\":\"h:gpu0\","
                    "\"wall_ms\":812.5,\"phases_ms\":{\"load\":1}}";
    CHECK(kg_result_parse(j, &r) == DK_OK, "parse: %s", dk_error());
    CHECK(r.status == KG_STATUS_OK && r.compiled && r.correct && !r.hack && kg_result_passed(&r), "flags");
    CHECK(strcmp(r.id, "a-1") == 0 && r.max_abs_diff == 2.5e-05 && r.speedup == 1.5, "numbers");
    CHECK(r.runtime.valid && r.runtime.median == 1.9 && r.runtime.trials == 50 && r.ref_runtime.mean == 3, "timings");
    CHECK(r.has_profile && r.coverage == 0.9 && r.side_streams && r.n_kernels == 1 && r.kernels[0].calls == 2 &&
              r.kernels[0].candidate && strcmp(r.kernels[0].name, "k") == 0,
          "profile");
    CHECK(r.reward == 1.32 && r.wall_ms == 812.5 && !strcmp(r.feedback, "fb") && !strcmp(r.worker, "h:gpu0"), "extras");
    CHECK(r.json && strstr(r.json, "\"phases_ms\":{\"load\":1}"), "raw JSON lost fields: %s", r.json);
    CHECK(kg_result_parse("{\"status\":\"hack\",\"hack\":{\"detected\":true,\"reasons\":[\"static:threads\",\"runtime:side_stream\"]},"
                          "\"speedup\":null,\"timing_available\":false}",
                          &r) == DK_OK,
          "hack parse");
    CHECK(r.hack && r.n_hack_reasons == 2 && !strcmp(r.hack_reasons[1], "runtime:side_stream") && isnan(r.speedup) &&
              !r.has_profile && isnan(r.coverage) && !kg_result_passed(&r),
          "hack fields");
    kg_result_free(&r);
}

static void test_strmap(void) {
    kg_strmap m;
    kg_strmap_init(&m);
    char key[32];
    for (intptr_t i = 0; i < 10000; i++) {
        snprintf(key, sizeof key, "job-%ld", (long)i);
        kg_strmap_put(&m, key, (void *)(i + 1));
    }
    int bad = 0, found;
    for (intptr_t i = 0; i < 10000; i += 2) {
        snprintf(key, sizeof key, "job-%ld", (long)i);
        bad += (intptr_t)kg_strmap_remove(&m, key, &found) != i + 1 || !found;
    }
    for (intptr_t i = 0; i < 10000; i++) {
        snprintf(key, sizeof key, "job-%ld", (long)i);
        void *v = kg_strmap_get(&m, key, &found);
        bad += (i % 2 == 0) ? found : (!found || (intptr_t)v != i + 1);
    }
    CHECK(bad == 0 && m.count == 5000, "strmap: %d wrong lookups, %zu entries", bad, m.count);
    kg_strmap_free(&m, NULL);
}

/* Local mode runs echo jobs in C: the bookkeeping without any server. */
static void test_local_client(void) {
    dk_status st;
    kg_client *c = kg_client_local(NULL, &st);
    CHECK(c && st == DK_OK, "local client: %s", dk_error());
    kg_job jobs[3];
    const char *payloads[3] = {"zero", "one", "two"};
    for (int i = 0; i < 3; i++) {
        kg_job_init(&jobs[i]);
        jobs[i].kind = KG_JOB_ECHO;
        jobs[i].payload = payloads[i];
    }
    kg_result res[3];
    CHECK(kg_client_submit_batch(c, jobs, 3, res) == DK_OK, "submit: %s", dk_error());
    CHECK(res[0].status == KG_STATUS_PENDING && strcmp(res[0].id, res[1].id) != 0, "fresh slots");
    /* Wait for the last one alone: the first two run before it and are kept. */
    int n_done = -1;
    CHECK(kg_client_wait(c, &res[2], 1, 10.0, &n_done) == DK_OK && n_done == 1, "wait one: %s", dk_error());
    CHECK(res[2].status == KG_STATUS_OK && strstr(res[2].json, "\"echo\":\"two\""), "slot 2 holds job 2: %s", res[2].json);
    CHECK(res[0].status == KG_STATUS_PENDING, "slot 0 was filled without a wait");
    /* Already here: a zero timeout is enough. */
    CHECK(kg_client_wait(c, res, 3, 0.0, &n_done) == DK_OK && n_done == 3, "kept results: %d", n_done);
    CHECK(strstr(res[0].json, "\"echo\":\"zero\"") && strstr(res[1].json, "\"echo\":\"one\""), "kept results in the right slots");
    CHECK(res[1].reward == 0.3 && res[1].feedback[0] && res[1].worker[0], "results are decorated (reward %g)", res[1].reward);
    /* A returned id cannot be waited for again. */
    kg_result again;
    kg_result_init(&again);
    snprintf(again.id, sizeof again.id, "%s", res[0].id);
    CHECK(kg_client_wait(c, &again, 1, 0.0, NULL) == DK_ERR_USAGE && strstr(dk_error(), "already returned"),
          "a returned id was accepted again");
    kg_result_free(&again);
    /* A deadline that passes before a job starts leaves it pending. */
    kg_job slow;
    kg_job_init(&slow);
    slow.kind = KG_JOB_SLEEP;
    slow.opt.sleep_s = 0.2;
    kg_result two[2];
    kg_job pair[2] = {slow, slow};
    double t0 = dk_now();
    CHECK(kg_client_run(c, pair, 2, 0.05, two, &n_done) == DK_OK && n_done == 1, "deadline: %d done", n_done);
    CHECK(two[1].status == KG_STATUS_PENDING && dk_now() - t0 < 1.0, "the second job started after the deadline");
    CHECK(kg_client_wait(c, two, 2, 5.0, &n_done) == DK_OK && n_done == 2, "continued wait: %d", n_done);
    for (int i = 0; i < 3; i++) kg_result_free(&res[i]);
    for (int i = 0; i < 2; i++) kg_result_free(&two[i]);
    kg_client_close(c);
}

int main(void) {
    test_urls();
    test_job_json();
    test_result_parse();
    test_strmap();
    test_local_client();
    printf("queue units: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
