/* test_kg_result_auth.c: the HMAC on KernelGym results (env/result_auth.h).
 *
 *   HMAC-SHA256 against RFC 4231's test cases 1 and 2;
 *   sign then verify gives back the exact text; a changed byte, a missing
 *   tag, a tag under another key are refused; without a key nothing is
 *   signed and everything passes; the key file and the password give
 *   different keys, a short key file is a usage error naming the file;
 *   through a real queue (a private redis-server; skipped without one): a
 *   result completed by someone who took the job from the queue without the
 *   key reaches the client as status error "refused", one signed with the
 *   password's key as the status it says. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "env/client.h"
#include "env/queue.h"
#include "env/redis_auto.h"
#include "env/redis_conn.h"
#include "env/result_auth.h"
#include "tests/check.h"

static void rfc4231(void) {
    unsigned char key1[20];
    memset(key1, 0x0b, sizeof key1);
    char hex[65];
    kg_hmac_sha256_hex(key1, sizeof key1, "Hi There", 8, hex);
    CHECK(strcmp(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7") == 0, "case 1: %s", hex);
    const char *data = "what do ya want for nothing?";
    kg_hmac_sha256_hex((const unsigned char *)"Jefe", 4, data, strlen(data), hex);
    CHECK(strcmp(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") == 0, "case 2: %s", hex);
}

static void sign_verify(void) {
    kg_result_key k, other, none;
    unsetenv("DK_KG_RESULT_KEY_FILE");
    CHECK(kg_result_key_load(&k, "secret-password") == DK_OK && k.have, "a key from the password");
    CHECK(kg_result_key_load(&other, "another-password") == DK_OK && other.have, "another key");
    CHECK(memcmp(k.key, other.key, sizeof k.key) != 0, "two passwords gave one key");
    CHECK(kg_result_key_load(&none, "") == DK_OK && !none.have, "an empty password gave a key");
    const char *text = "{\"id\":\"j-1\",\"status\":\"ok\",\"speedup\":1.5}";

    char *s = kg_result_auth_sign(&k, dk_strdup(text));
    CHECK(strstr(s, ",\"auth\":\"") != NULL && strlen(s) == strlen(text) + 74, "signed: %s", s);
    CHECK(kg_result_auth_verify(&k, s) == DK_OK && strcmp(s, text) == 0, "verify gave back %s", s);
    free(s);

    s = kg_result_auth_sign(&k, dk_strdup(text));
    s[strlen("{\"id\":\"j-1\",\"status\":\"ok\",\"speedup\":")] = '9'; /* 1.5 -> 9.5 */
    CHECK(kg_result_auth_verify(&k, s) != DK_OK && strstr(dk_error(), "does not match"), "an altered result passed");
    dk_error_clear();
    free(s);

    s = kg_result_auth_sign(&other, dk_strdup(text));
    CHECK(kg_result_auth_verify(&k, s) != DK_OK, "a tag under another key passed");
    dk_error_clear();
    free(s);

    s = dk_strdup(text);
    CHECK(kg_result_auth_verify(&k, s) != DK_OK && strstr(dk_error(), "no authentication tag"), "an unsigned result passed");
    dk_error_clear();
    s = kg_result_auth_accept(&k, "j-1", s);
    CHECK(strstr(s, "\"status\":\"error\"") && strstr(s, "refused") && strstr(s, "\"id\":\"j-1\""),
          "accept of an unsigned result: %s", s);
    free(s);

    s = kg_result_auth_sign(&none, dk_strdup(text));
    CHECK(strcmp(s, text) == 0 && kg_result_auth_verify(&none, s) == DK_OK, "without a key: %s", s);
    free(s);

    char path[] = "/tmp/kg-key-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    CHECK(write(fd, "short", 5) == 5, "write");
    setenv("DK_KG_RESULT_KEY_FILE", path, 1);
    kg_result_key f;
    CHECK(kg_result_key_load(&f, "secret-password") == DK_ERR_USAGE && strstr(dk_error(), path), "a short key file");
    dk_error_clear();
    CHECK(write(fd, " but long enough now", 20) == 20, "write");
    close(fd);
    CHECK(kg_result_key_load(&f, "secret-password") == DK_OK && f.have && memcmp(f.key, k.key, sizeof k.key) != 0,
          "the key file's key");
    unlink(path);
    setenv("DK_KG_RESULT_KEY_FILE", "/nonexistent/kg.key", 1);
    CHECK(kg_result_key_load(&f, NULL) == DK_ERR_USAGE && strstr(dk_error(), "/nonexistent/kg.key"), "a missing key file");
    dk_error_clear();
    unsetenv("DK_KG_RESULT_KEY_FILE");
}

/* Takes the next job from the queue as an outsider would and completes it
 * with json (signed with key when key is not NULL). */
static void forge(redisContext *rc, const char *client, const kg_result_key *key, const char *status, char id[KG_ID_LEN]) {
    int got = 0;
    CHECK(kg_queue_take(rc, "forger", 5.0, id, &got) == DK_OK && got, "no job to take");
    char json[512];
    snprintf(json, sizeof json,
             "{\"id\":\"%s\",\"status\":\"%s\",\"compiled\":true,\"correct\":true,\"speedup\":900.0,\"reward\":9.0}", id,
             status);
    char *text = dk_strdup(json);
    if (key) text = kg_result_auth_sign(key, text);
    CHECK(kg_queue_complete(rc, "forger", id, client, text, 60.0) == DK_OK, "complete: %s", dk_error());
    free(text);
}

static void through_the_queue(void) {
    if (!kg_redis_server_available()) {
        printf("redis-server not in PATH: the queue part is skipped\n");
        return;
    }
    kg_redis_auto ra;
    if (kg_redis_auto_start(&ra, 10.0) != DK_OK) {
        CHECK(0, "redis: %s", dk_error());
        return;
    }
    dk_status st;
    kg_client *c = kg_client_connect(ra.url, &st);
    kg_redis_url u;
    redisContext *rc = NULL;
    CHECK(c && kg_redis_url_parse(ra.url, &u) == DK_OK && kg_redis_connect(&u, 5.0, &rc) == DK_OK, "connect: %s",
          dk_error());
    if (c && rc) {
        kg_result_key key;
        CHECK(kg_result_key_load(&key, u.password) == DK_OK && key.have, "the password's key");
        const char *statuses[] = {"ok", "ok"};
        const kg_result_key *keys[] = {NULL, &key};
        for (int i = 0; i < 2; i++) {
            kg_job job;
            kg_job_init(&job);
            job.kind = KG_JOB_ECHO;
            job.payload = "x";
            kg_result r;
            CHECK(kg_client_submit_batch(c, &job, 1, &r) == DK_OK, "submit");
            char id[KG_ID_LEN];
            forge(rc, kg_client_name(c), keys[i], statuses[i], id);
            int n_done = 0;
            CHECK(kg_client_wait(c, &r, 1, 10.0, &n_done) == DK_OK && n_done == 1, "wait");
            if (i == 0)
                CHECK(r.status == KG_STATUS_ERROR && r.error && strstr(r.error, "refused"),
                      "a forged unsigned result reached the client as status %d (%s)", (int)r.status,
                      r.error ? r.error : "");
            else
                CHECK(r.status == KG_STATUS_OK, "a result signed with the key was refused: %s", r.error ? r.error : "");
            printf("queue: %s result -> status %s %s\n", keys[i] ? "signed" : "unsigned forged",
                   r.status == KG_STATUS_OK ? "ok" : "error", r.error ? r.error : "");
            kg_result_free(&r);
        }
    }
    if (rc) redisFree(rc);
    if (c) kg_client_close(c);
    kg_redis_auto_stop(&ra);
}

int main(void) {
    rfc4231();
    sign_verify();
    through_the_queue();
    return check_report();
}
