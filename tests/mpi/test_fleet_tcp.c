/* test_fleet_tcp.c: the pieces of a fleet that serves several nodes
 * (env/redis_auto.h, env/fleet.h), checked on one machine:
 *   - kg_redis_auto_start_tcp listens on a routable (non-loopback) address
 *     and a port, only there; its config file is 0600 and holds the
 *     password; the URL's password connects, no password and a wrong one
 *     are refused; the URL passes the exposure check;
 *     after a kill it restarts on the same port with its data (AOF);
 *   - a fleet on that URL started with a stand-in worker (a shell script
 *     that writes its environment and command line to a file) hands each
 *     worker the URL in KERNELGYM_REDIS and the GPU memory cap in
 *     DK_KG_GPU_MEMORY_GB, and the password is on no command line;
 *   - kg_fleet_stop ends the workers and the Redis.
 * Exits 77 without redis-server. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "env/fleet.h"
#include "env/redis_auto.h"
#include "env/redis_conn.h"
#include "tests/check.h"

/* The text of a file, "" when it cannot be read. */
static char *slurp(const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (dk_read_file(path, &text, &len) != DK_OK) {
        dk_error_clear();
        return dk_strdup("");
    }
    return text;
}

/* Connects to u with the given password; the reply's error, or "" when it
 * answered PING. */
static void try_password(const kg_redis_url *u, const char *password, char *out, size_t n) {
    kg_redis_url v = *u;
    snprintf(v.password, sizeof v.password, "%s", password);
    redisContext *c = NULL;
    if (kg_redis_connect(&v, 2.0, &c) == DK_OK) {
        out[0] = '\0';
        redisFree(c);
    } else {
        snprintf(out, n, "%s", dk_error());
        dk_error_clear();
    }
}

int main(void) {
    if (!kg_redis_server_available()) {
        printf("redis-server not installed: skipped\n");
        return 77;
    }
    kg_redis_auto ra;
    dk_status st = kg_redis_auto_start_tcp(&ra, 10.0);
    if (st != DK_OK && strstr(dk_error(), "no routable IPv4 address")) {
        printf("%s: skipped\n", dk_error());
        return 77;
    }
    CHECK(st == DK_OK, "start on TCP: %s", dk_error());
    if (st != DK_OK) return check_report();
    kg_redis_url u;
    CHECK(kg_redis_url_parse(ra.url, &u) == DK_OK, "the URL parses: %s", dk_error());
    struct in_addr a;
    CHECK(!u.is_unix && inet_pton(AF_INET, u.host, &a) == 1 && (ntohl(a.s_addr) >> 24) != 127,
          "a routable IPv4 address, not loopback: %s", u.host);
    CHECK(u.port == ra.port && u.port > 0 && strlen(u.password) == 64, "port %d (%d), password of %zu chars", u.port,
          ra.port, strlen(u.password));
    CHECK(kg_redis_url_check_exposure(&u, 0, "x") == DK_OK, "the exposure check passes: %s", dk_error());

    char conf[sizeof ra.dir + 16];
    snprintf(conf, sizeof conf, "%s/redis.conf", ra.dir);
    struct stat sb;
    CHECK(stat(conf, &sb) == 0 && (sb.st_mode & 0777) == 0600, "redis.conf is 0600 (%o)", sb.st_mode & 0777);
    char *text = slurp(conf);
    char want[sizeof u.host + 8];
    snprintf(want, sizeof want, "bind %s\n", u.host);
    CHECK(strstr(text, want) && strstr(text, u.password) && !strstr(text, "unixsocket"),
          "redis.conf binds %s only and holds the password:\n%s", u.host, text);
    free(text);

    char err[1024];
    try_password(&u, u.password, err, sizeof err);
    CHECK(!err[0], "the URL's password connects: %s", err);
    try_password(&u, "", err, sizeof err);
    CHECK(strstr(err, "needs a password"), "no password is refused: '%s'", err);
    try_password(&u, "wrong", err, sizeof err);
    CHECK(strstr(err, "WRONGPASS") || strstr(err, "invalid"), "a wrong password is refused: '%s'", err);

    /* Data survives a kill and a restart on the same port. */
    redisContext *c = NULL;
    CHECK(kg_redis_connect(&u, 2.0, &c) == DK_OK, "connect: %s", dk_error());
    redisReply *r = c ? kg_redis_cmd(c, "SET kg:test:tcp survived") : NULL;
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    sleep(2); /* appendfsync everysec */
    kill(ra.pid, SIGKILL);
    char how[1024];
    for (int i = 0; i < 100 && kg_redis_auto_alive(&ra, how, sizeof how); i++) usleep(20000);
    CHECK(kg_redis_auto_restart(&ra, 10.0) == DK_OK && ra.port == u.port, "restart on port %d: %s", ra.port,
          dk_error());
    c = NULL;
    r = kg_redis_connect(&u, 2.0, &c) == DK_OK ? kg_redis_cmd(c, "GET kg:test:tcp") : NULL;
    CHECK(r && r->type == REDIS_REPLY_STRING && !strcmp(r->str, "survived"), "the key survived the restart");
    if (r) freeReplyObject(r);
    if (c) redisFree(c);

    /* A fleet of stand-in workers on that URL. */
    char tmp[] = "/tmp/dk-fleet-tcp-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    char script[512], out[512];
    snprintf(script, sizeof script, "%s/worker.sh", tmp);
    snprintf(out, sizeof out, "%s/seen", tmp);
    FILE *f = fopen(script, "w");
    fprintf(f, "#!/bin/sh\n{ echo \"redis=$KERNELGYM_REDIS\"; echo \"gpu_gb=$DK_KG_GPU_MEMORY_GB\"; "
               "echo \"args=$(tr '\\0' ' ' < /proc/$$/cmdline)\"; } > %s.$$.tmp && mv %s.$$.tmp %s.$$\n"
               "exec sleep 60\n",
            out, out, out);
    fclose(f);
    chmod(script, 0700);
    kg_fleet_config fc;
    kg_fleet_config_default(&fc);
    snprintf(fc.redis, sizeof fc.redis, "%s", ra.url);
    snprintf(fc.exe, sizeof fc.exe, "%s", script);
    snprintf(fc.device, sizeof fc.device, "cuda");
    fc.n_gpus = 2;
    fc.gpus[0] = 0;
    fc.gpus[1] = 1;
    fc.gpu_memory_gb = 12.5;
    kg_fleet fl;
    CHECK(kg_fleet_start(&fl, &fc) == DK_OK && fl.n == 2 && !fl.own_redis, "fleet on the URL: %s", dk_error());
    int seen = 0;
    for (int w = 0; w < fl.n; w++) {
        char path[600];
        snprintf(path, sizeof path, "%s.%d", out, (int)fl.pid[w]);
        char *got;
        for (int i = 0; i < 250 && access(path, F_OK) != 0; i++) usleep(20000);
        got = slurp(path);
        char want_url[1500];
        snprintf(want_url, sizeof want_url, "redis=%s\n", ra.url);
        const char *line = strstr(got, "args=");
        CHECK(strstr(got, want_url) && strstr(got, "gpu_gb=12.5\n"), "worker %d's environment:\n%s", w, got);
        CHECK(line && !strstr(line, u.password), "worker %d's command line has no password:\n%s", w, got);
        seen += strstr(got, "--gpu") != NULL;
        free(got);
    }
    CHECK(seen == 2, "both workers got --gpu (%d)", seen);
    pid_t w0 = fl.pid[0], w1 = fl.pid[1];
    kg_fleet_stop(&fl, 5.0);
    CHECK(kill(w0, 0) != 0 && kill(w1, 0) != 0, "the workers ended with kg_fleet_stop");
    pid_t rp = ra.pid;
    kg_redis_auto_stop(&ra);
    CHECK(kill(rp, 0) != 0 && access(ra.dir, F_OK) != 0, "Redis ended and its dir is gone");
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf %s", tmp);
    CHECK(system(rm) == 0, "rm");
    return check_report();
}
