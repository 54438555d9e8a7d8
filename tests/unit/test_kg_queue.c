/* test_kg_queue.c: the KernelGym Redis queue end to end with a real
 * redis-server (started privately, like `--redis auto`) and real
 * `kernelgym worker` processes running "sleep"/"echo" jobs, which the worker
 * completes itself (no Python):
 *   - a client's wait times out cleanly when no worker exists;
 *   - 1000 jobs through 4 workers, two of them joining late and one killed
 *     with SIGKILL in the middle of a job: every job completes exactly once
 *     (one result per job, the killed worker's job re-queued by the reaper and
 *     finished elsewhere) and none is lost;
 *   - a duplicate completion notification is ignored;
 *   - a worker stopped with SIGTERM mid-job gives the job back and exits 0.
 * Exits 77 when redis-server is not installed. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "env/client.h"
#include "env/fleet.h"
#include "env/queue.h"
#include "env/redis_auto.h"
#include "env/redis_conn.h"
#include "tests/check.h"

#define N_JOBS 1000

static char exe[4096];
static kg_redis_auto ra;

static pid_t start_worker(const char *name) {
    pid_t pid = fork();
    if (pid == 0) {
        setenv("KERNELGYM_REDIS", ra.url, 1);
        execl(exe, exe, "worker", "--name", name, "--heartbeat", "2", "--lazy", "--device", "cpu", (char *)NULL);
        _exit(127);
    }
    return pid;
}

static long long redis_int(redisContext *c, const char *fmt, const char *arg) {
    redisReply *r = kg_redis_cmd(c, fmt, arg);
    long long v = (r && r->type == REDIS_REPLY_INTEGER) ? r->integer : -1;
    if (r) freeReplyObject(r);
    return v;
}

/* Waits until at least target results are in (or max_s passes). */
static int wait_until(kg_client *c, kg_result *res, int n, int target, double max_s) {
    int done = 0;
    double end = dk_now() + max_s;
    while (done < target && dk_now() < end) {
        if (kg_client_wait(c, res, n, 0.1, &done) != DK_OK) {
            fprintf(stderr, "wait: %s\n", dk_error());
            return -1;
        }
    }
    return done;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void) {
    if (!kg_redis_server_available()) {
        printf("redis-server not in PATH: skipped\n");
        return 77;
    }
    const char *build = getenv("DK_BUILD");
    if (build) snprintf(exe, sizeof exe, "%s/kernelgym", build);
    if (!build || access(exe, X_OK) != 0) {
        if (!kg_fleet_find_exe(exe, sizeof exe)) {
            fprintf(stderr, "FAIL: the kernelgym executable was not found (set DK_BUILD)\n");
            return 1;
        }
    }
    double t_start = dk_now();
    if (kg_redis_auto_start(&ra, 10.0) != DK_OK) {
        fprintf(stderr, "FAIL: %s\n", dk_error());
        return 1;
    }
    dk_status st;
    kg_client *c = kg_client_connect(ra.url, &st);
    if (!c) {
        fprintf(stderr, "FAIL: %s\n", dk_error());
        kg_redis_auto_stop(&ra);
        return 1;
    }
    redisContext *rc = NULL;
    kg_redis_url u;
    kg_redis_url_parse(ra.url, &u);
    kg_redis_connect(&u, 5.0, &rc);

    /* 1. No worker: the wait ends at its deadline with the job pending. */
    kg_job echo;
    kg_job_init(&echo);
    echo.kind = KG_JOB_ECHO;
    echo.payload = "hello";
    kg_result first;
    int n_done = -1;
    double t0 = dk_now();
    st = kg_client_run(c, &echo, 1, 1.0, &first, &n_done);
    double waited = dk_now() - t0;
    CHECK(st == DK_OK, "wait without workers failed: %s", dk_error());
    CHECK(n_done == 0 && first.status == KG_STATUS_PENDING, "no worker, yet %d done", n_done);
    CHECK(waited >= 0.9 && waited < 3.0, "wait without workers took %.2f s (deadline 1 s)", waited);
    printf("no worker: wait returned after %.2f s with the job pending\n", waited);

    /* 2. Two workers join; the pending echo job completes with its payload. */
    pid_t w[4];
    w[0] = start_worker("qA");
    w[1] = start_worker("qB");
    st = kg_client_wait(c, &first, 1, 15.0, &n_done);
    CHECK(st == DK_OK && n_done == 1 && first.status == KG_STATUS_OK, "echo job not completed (%d)", n_done);
    CHECK(strstr(first.json ? first.json : "", "\"echo\":\"hello\"") != NULL, "echo payload lost: %s", first.json);
    kg_result_free(&first);

    /* 3. 1000 sleep jobs (10 ms each). */
    kg_job *jobs = calloc(N_JOBS, sizeof *jobs);
    kg_result *res = calloc(N_JOBS, sizeof *res);
    for (int i = 0; i < N_JOBS; i++) {
        kg_job_init(&jobs[i]);
        jobs[i].kind = KG_JOB_SLEEP;
        jobs[i].opt.sleep_s = 0.01;
    }
    st = kg_client_submit_batch(c, jobs, N_JOBS, res);
    CHECK(st == DK_OK, "submit: %s", dk_error());
    double t_jobs = dk_now();

    /* Late joiners after 150 results. */
    int d = wait_until(c, res, N_JOBS, 150, 20.0);
    CHECK(d >= 150, "only %d of 150 results before the late workers", d);
    w[2] = start_worker("qC");
    w[3] = start_worker("qD");

    /* SIGKILL qB while it holds a job (its processing list is not empty).
     * qB is stopped before its list is read, so the job it holds cannot
     * finish between the read and the kill; the pause lets Redis apply a
     * completion qB had already sent. Caught between two jobs, qB is let go
     * on and tried again. */
    d = wait_until(c, res, N_JOBS, 400, 20.0);
    CHECK(d >= 400, "only %d of 400 results before the kill", d);
    char held[KG_ID_LEN] = "";
    for (int tries = 0; tries < 200 && !held[0]; tries++) {
        kill(w[1], SIGSTOP);
        waitpid(w[1], NULL, WUNTRACED);
        sleep_ms(50);
        redisReply *r = kg_redis_cmd(rc, "LINDEX kg:processing:%s 0", "qB");
        if (r && r->type == REDIS_REPLY_STRING) {
            kill(w[1], SIGKILL);
            snprintf(held, sizeof held, "%s", r->str);
        } else {
            kill(w[1], SIGCONT);
        }
        if (r) freeReplyObject(r);
        if (!held[0]) sleep_ms(1);
    }
    waitpid(w[1], NULL, 0);
    long long held_after = redis_int(rc, "LLEN kg:processing:%s", "qB");
    CHECK(held[0] && held_after == 1, "qB was not killed mid-job (held '%s', %lld in processing)", held, held_after);
    printf("killed qB (SIGKILL) holding job %s\n", held);

    d = wait_until(c, res, N_JOBS, N_JOBS, 40.0);
    double t_all = dk_now() - t_jobs;
    CHECK(d == N_JOBS, "%d of %d jobs completed: jobs were lost", d, N_JOBS);

    /* Exactly once: each slot holds its own job's single result. */
    int per_worker[4] = {0}, bad = 0, held_by = -1;
    const char *names[4] = {"qA", "qB", "qC", "qD"};
    for (int i = 0; i < N_JOBS; i++) {
        if (res[i].status != KG_STATUS_OK) bad++;
        for (int k = 0; k < 4; k++)
            if (strcmp(res[i].worker, names[k]) == 0) {
                per_worker[k]++;
                if (strcmp(res[i].id, held) == 0) held_by = k;
            }
        /* The result's own id must be the slot's id (no mix-up). */
        cJSON *j = cJSON_Parse(res[i].json ? res[i].json : "");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
        if (!cJSON_IsString(id) || strcmp(id->valuestring, res[i].id) != 0) bad++;
        cJSON_Delete(j);
    }
    CHECK(bad == 0, "%d results are not ok or belong to another job", bad);
    CHECK(per_worker[0] + per_worker[1] + per_worker[2] + per_worker[3] == N_JOBS, "results from unknown workers");
    CHECK(per_worker[2] > 0 && per_worker[3] > 0, "late workers took no jobs (qC %d, qD %d)", per_worker[2], per_worker[3]);
    CHECK(held_by >= 0 && held_by != 1, "the job qB held was not finished by another worker (by %d)", held_by);
    printf("%d jobs in %.2f s: qA %d, qB %d (killed), qC %d, qD %d (late); qB's job %s finished by %s\n", N_JOBS,
           t_all, per_worker[0], per_worker[1], per_worker[2], per_worker[3], held, held_by >= 0 ? names[held_by] : "-");

    kg_queue_stats qs;
    kg_queue_get_stats(rc, &qs);
    CHECK(qs.queued == 0 && qs.processing == 0, "left over: %lld queued, %lld processing", qs.queued, qs.processing);
    CHECK(redis_int(rc, "SISMEMBER kg:workers %s", "qB") == 0, "the dead worker qB is still registered");
    CHECK(redis_int(rc, "EXISTS kg:result:%s", res[0].id) == 0, "a delivered result was left in Redis");

    /* 4. A duplicate notification for a delivered job is ignored. */
    redisReply *r = kg_redis_cmd(rc, "SET kg:result:%s {\"id\":\"x\",\"status\":\"crash\"}", res[5].id);
    if (r) freeReplyObject(r);
    char done_key[256];
    snprintf(done_key, sizeof done_key, "kg:done:%s", kg_client_name(c));
    r = kg_redis_cmd(rc, "RPUSH %s %s", done_key, res[5].id);
    if (r) freeReplyObject(r);
    kg_result again;
    st = kg_client_run(c, &echo, 1, 10.0, &again, &n_done);
    CHECK(st == DK_OK && n_done == 1 && again.status == KG_STATUS_OK, "echo after a duplicate failed");
    CHECK(res[5].status == KG_STATUS_OK, "a duplicate overwrote a delivered result");
    CHECK(redis_int(rc, "EXISTS kg:result:%s", res[5].id) == 0, "the duplicate's result copy was not dropped");
    kg_result_free(&again);

    /* 5. SIGTERM mid-job: qA gives its 3 s job back and leaves with exit 0. */
    for (int k = 0; k < 4; k++)
        if (k != 0 && k != 1) kill(w[k], SIGTERM);
    for (int k = 2; k < 4; k++) {
        int ws = 0;
        waitpid(w[k], &ws, 0);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "worker %s did not exit 0 on SIGTERM", names[k]);
    }
    kg_job slow;
    kg_job_init(&slow);
    slow.kind = KG_JOB_SLEEP;
    slow.opt.sleep_s = 3.0;
    kg_result sres;
    st = kg_client_submit_batch(c, &slow, 1, &sres);
    int taken = 0;
    for (int tries = 0; tries < 500 && !taken; tries++) {
        taken = redis_int(rc, "LLEN kg:processing:%s", "qA") == 1;
        if (!taken) sleep_ms(10);
    }
    CHECK(taken, "qA did not take the slow job");
    double t_term = dk_now();
    kill(w[0], SIGTERM);
    int ws = 0;
    waitpid(w[0], &ws, 0);
    double t_exit = dk_now() - t_term;
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "qA did not exit 0 on SIGTERM");
    CHECK(t_exit < 2.5, "qA took %.2f s to leave", t_exit);
    CHECK(redis_int(rc, "LLEN %s", "kg:queue") == 1, "qA's unfinished job is not back in the queue");
    pid_t w5 = start_worker("qE");
    st = kg_client_wait(c, &sres, 1, 15.0, &n_done);
    CHECK(st == DK_OK && n_done == 1 && strcmp(sres.worker, "qE") == 0, "the given-back job was not finished by qE");
    printf("SIGTERM mid-job: qA left in %.2f s, its job finished by %s\n", t_exit, sres.worker);
    kg_result_free(&sres);
    kill(w5, SIGTERM);
    waitpid(w5, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "qE did not exit 0");

    for (int i = 0; i < N_JOBS; i++) kg_result_free(&res[i]);
    free(res);
    free(jobs);
    redisFree(rc);
    kg_client_close(c);
    kg_redis_auto_stop(&ra);
    CHECK(!dk_dir_exists(ra.dir), "the private Redis folder %s was not removed", ra.dir);
    printf("total %.1f s; %s\n", dk_now() - t_start, failures ? "FAILED" : "all queue checks passed");
    return failures ? 1 : 0;
}
