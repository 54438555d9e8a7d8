/* redis_auto.c: start, probe, restart and stop a private redis-server. */
#define _GNU_SOURCE
#include "env/redis_auto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "env/proc_util.h"
#include "env/redis_conn.h"

int kg_redis_server_available(void) {
    char path[4096];
    return kg_find_in_path("redis-server", path, sizeof path);
}

static void log_tail(const char *dir, char *out, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/redis.log", dir);
    out[0] = '\0';
    char *text = NULL;
    size_t len = 0;
    if (dk_read_file(p, &text, &len) != DK_OK) {
        dk_error_clear();
        return;
    }
    size_t keep = n - 1 < 400 ? n - 1 : 400;
    snprintf(out, n, "%s", len > keep ? text + len - keep : text);
    free(text);
}

/* The config: a unix socket in the dir, or (ra->port > 0) TCP on
 * ra->host:ra->port only. The password is in this 0600 file, never on a
 * command line. */
static dk_status write_config(const kg_redis_auto *ra, const char *password) {
    char path[512], conf[2048], listen[600];
    snprintf(path, sizeof path, "%s/redis.conf", ra->dir);
    if (ra->port > 0)
        snprintf(listen, sizeof listen, "port %d\nbind %s\nprotected-mode yes\n", ra->port, ra->host);
    else
        snprintf(listen, sizeof listen, "port 0\nunixsocket %s/redis.sock\nunixsocketperm 700\n", ra->dir);
    int n = snprintf(conf, sizeof conf,
                     "%s"
                     "requirepass %s\n"
                     "save \"\"\n"
                     "appendonly yes\n"
                     "appendfsync everysec\n"
                     "dir %s\n"
                     "logfile %s/redis.log\n"
                     "daemonize no\n",
                     listen, password, ra->dir, ra->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return dk_fail(DK_ERR_RUNTIME, "%s: cannot create: %s", path, strerror(errno));
    ssize_t w = write(fd, conf, (size_t)n);
    close(fd);
    if (w != n) return dk_fail(DK_ERR_RUNTIME, "%s: short write", path);
    return DK_OK;
}

/* Starts redis-server on the dir's config (loading its AOF, if any) and
 * waits until it answers; on failure nothing is left running. */
static dk_status spawn_and_wait(kg_redis_auto *ra, double timeout_s, const char *what) {
    char exe[4096];
    if (!kg_find_in_path("redis-server", exe, sizeof exe))
        return dk_fail(DK_ERR_RUNTIME, "%s: redis-server is not in PATH (install the redis-server package)", what);
    char conf[512];
    snprintf(conf, sizeof conf, "%s/redis.conf", ra->dir);
    pid_t parent = ra->owner;
    pid_t pid = fork();
    if (pid < 0) return dk_fail(DK_ERR_RUNTIME, "%s: fork: %s", what, strerror(errno));
    if (pid == 0) {
        kg_child_setup(parent, SIGTERM);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
        }
        execl(exe, "redis-server", conf, (char *)NULL);
        _exit(127);
    }
    ra->pid = pid;
    kg_redis_url u;
    if (kg_redis_url_parse(ra->url, &u) != DK_OK) DK_ABORT("auto redis URL does not parse: %s", dk_error());
    double deadline = dk_now() + timeout_s;
    for (;;) {
        int ws;
        if (kg_wait_exit(pid, 0, &ws)) {
            char why[128], tail[512];
            kg_describe_exit(ws, why, sizeof why);
            log_tail(ra->dir, tail, sizeof tail);
            ra->pid = 0;
            return dk_fail(DK_ERR_RUNTIME, "%s: redis-server stopped at start-up (%s)%s%s", what, why,
                           tail[0] ? "; its log ends with: " : "", tail);
        }
        /* A server still loading its AOF answers LOADING: not ready yet. */
        redisContext *c = NULL;
        if (kg_redis_connect(&u, 1.0, &c) == DK_OK) {
            redisFree(c);
            dk_error_clear();
            return DK_OK;
        }
        if (dk_now() > deadline) {
            char tail[512];
            log_tail(ra->dir, tail, sizeof tail);
            kg_terminate(pid, 0, 5.0);
            ra->pid = 0;
            return dk_fail(DK_ERR_RUNTIME, "%s: redis-server did not answer within %.0f s%s%s", what, timeout_s,
                           tail[0] ? "; its log ends with: " : "", tail);
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The fresh 0700 dir of a private Redis; "" and a message when it cannot be made. */
static dk_status make_dir(kg_redis_auto *ra, const char *what) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > 60) tmp = "/tmp";
    snprintf(ra->dir, sizeof ra->dir, "%s/kernelgym-redis-XXXXXX", tmp);
    if (!mkdtemp(ra->dir)) {
        dk_status s = dk_fail(DK_ERR_RUNTIME, "%s: mkdtemp %s: %s", what, ra->dir, strerror(errno));
        ra->dir[0] = '\0';
        return s;
    }
    return DK_OK;
}

dk_status kg_redis_auto_start(kg_redis_auto *ra, double timeout_s) {
    memset(ra, 0, sizeof *ra);
    if (!kg_redis_server_available())
        return dk_fail(DK_ERR_RUNTIME, "--redis auto: redis-server is not in PATH (install the redis-server package)");
    DK_TRY(make_dir(ra, "--redis auto"));
    char password[65];
    kg_random_hex(password, 24);
    dk_status s = write_config(ra, password);
    if (s != DK_OK) {
        dk_remove_tree(ra->dir);
        return s;
    }
    snprintf(ra->url, sizeof ra->url, "unix://%s/redis.sock?password=%s", ra->dir, password);
    ra->owner = getpid();
    s = spawn_and_wait(ra, timeout_s, "--redis auto");
    if (s != DK_OK) dk_remove_tree(ra->dir);
    return s;
}

/* 1 for an IPv4 address other nodes may reach: not loopback (127/8), not
 * unspecified. */
static int routable4(const struct in_addr *a) {
    uint32_t h = ntohl(a->s_addr);
    return h != 0 && (h >> 24) != 127;
}

dk_status kg_routable_address(char *out, size_t n) {
    /* The host name first: on a cluster it names the address the nodes use. */
    char host[256];
    kg_hostname(host, sizeof host);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) == 0) {
        for (struct addrinfo *p = res; p; p = p->ai_next) {
            const struct in_addr *a = &((const struct sockaddr_in *)p->ai_addr)->sin_addr;
            if (routable4(a) && inet_ntop(AF_INET, a, out, (socklen_t)n)) {
                freeaddrinfo(res);
                return DK_OK;
            }
        }
        freeaddrinfo(res);
    }
    /* Else the first interface that is up with a routable IPv4 address. */
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
                (i->ifa_flags & IFF_LOOPBACK))
                continue;
            const struct in_addr *a = &((const struct sockaddr_in *)i->ifa_addr)->sin_addr;
            if (routable4(a) && inet_ntop(AF_INET, a, out, (socklen_t)n)) {
                freeifaddrs(ifs);
                return DK_OK;
            }
        }
        freeifaddrs(ifs);
    }
    return dk_fail(DK_ERR_RUNTIME, "no routable IPv4 address on this host (host name '%s' and every interface "
                                   "are loopback or down): the other nodes could not reach a Redis here", host);
}

/* A TCP port free on host right now (the kernel's choice for port 0). */
static dk_status free_port(const char *host, int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return dk_fail(DK_ERR_RUNTIME, "socket: %s", strerror(errno));
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, host, &a.sin_addr);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        dk_status s = dk_fail(DK_ERR_RUNTIME, "cannot bind a TCP port on %s: %s", host, strerror(errno));
        close(fd);
        return s;
    }
    close(fd);
    *port = ntohs(a.sin_port);
    return DK_OK;
}

dk_status kg_redis_auto_start_tcp(kg_redis_auto *ra, double timeout_s) {
    const char *what = "redis = auto over TCP";
    memset(ra, 0, sizeof *ra);
    if (!kg_redis_server_available())
        return dk_fail(DK_ERR_RUNTIME, "%s: redis-server is not in PATH (install the redis-server package)", what);
    char host[64];
    dk_status s = kg_routable_address(host, sizeof host);
    if (s != DK_OK) return dk_wrap(s, "%s: ", what);
    snprintf(ra->host, sizeof ra->host, "%s", host);
    DK_TRY(make_dir(ra, what));
    char password[65];
    kg_random_hex(password, 32);
    ra->owner = getpid();
    /* Another program may take the free port before Redis binds it: a few tries. */
    for (int attempt = 0; attempt < 4; attempt++) {
        s = free_port(host, &ra->port);
        if (s == DK_OK) s = write_config(ra, password);
        if (s != DK_OK) break;
        snprintf(ra->url, sizeof ra->url, "redis://:%s@%s:%d", password, host, ra->port);
        s = spawn_and_wait(ra, timeout_s, what);
        if (s == DK_OK) return DK_OK;
    }
    dk_remove_tree(ra->dir);
    return s;
}

int kg_redis_auto_alive(kg_redis_auto *ra, char *how, size_t n) {
    if (ra->pid <= 0) {
        snprintf(how, n, "not running");
        return 0;
    }
    int ws;
    if (!kg_wait_exit(ra->pid, 0, &ws)) return 1;
    char why[128], tail[512];
    kg_describe_exit(ws, why, sizeof why);
    log_tail(ra->dir, tail, sizeof tail);
    for (char *p = tail; *p; p++)
        if (*p == '\n') *p = ' ';
    snprintf(how, n, "%s%s%s", why, tail[0] ? "; its log ends with: " : "", tail);
    ra->pid = 0;
    return 0;
}

dk_status kg_redis_auto_restart(kg_redis_auto *ra, double timeout_s) {
    if (ra->owner != getpid()) return dk_fail(DK_ERR_RUNTIME, "private redis: only the process that started it may restart it");
    if (ra->pid > 0) {
        kg_terminate(ra->pid, 0, 5.0);
        ra->pid = 0;
    }
    char sock[512];
    snprintf(sock, sizeof sock, "%s/redis.sock", ra->dir);
    if (ra->port <= 0) unlink(sock); /* a killed server leaves it behind */
    return spawn_and_wait(ra, timeout_s, "private redis restart");
}

void kg_redis_auto_stop(kg_redis_auto *ra) {
    if (ra->pid <= 0 || ra->owner != getpid()) return;
    kg_terminate(ra->pid, 0, 5.0);
    ra->pid = 0;
    dk_remove_tree(ra->dir);
}
