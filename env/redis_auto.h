/* redis_auto.h: `--redis auto`, a private redis-server for one machine. It
 * listens only on a unix socket inside a fresh 0700 temp dir, requires a
 * random password (written to a 0600 config file, never on a command line),
 * keeps an append-only file in that dir (appendonly yes, fsync every second;
 * no snapshots), lives in its own process group and dies with the process
 * that started it. When it dies, kg_redis_auto_restart starts it again on
 * the same socket and password and it replays the AOF, so queued jobs and
 * stored results survive (what the last second wrote may not: the clients
 * queue again what is missing, client.h). Stop it with kg_redis_auto_stop,
 * which also removes the temp dir.
 *
 * For a job over several nodes, kg_redis_auto_start_tcp listens on TCP
 * instead, on a routable address of this host only (never 0.0.0.0) and a
 * free port, with a 32-byte random password that only the URL carries: the
 * caller hands the URL to the other nodes over MPI and to its workers
 * through their environment, never on a command line. */
#ifndef KG_REDIS_AUTO_H
#define KG_REDIS_AUTO_H

#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"

typedef struct {
    pid_t pid;   /* redis-server, 0 when not running */
    pid_t owner; /* the process that started it: only it may stop it */
    char dir[256];
    char host[64];  /* TCP only: the address it listens on */
    int port;       /* TCP only: its port; 0 for the unix socket */
    char url[1400]; /* unix:///DIR/redis.sock?password=..., or redis://:PASSWORD@HOST:PORT */
} kg_redis_auto;

/* The temp dir is made under $TMPDIR when that is short (unix socket paths
 * are limited to 107 bytes), else /tmp.
 * Fails (runtime) when redis-server is not in PATH or does not answer within
 * timeout_s; the message then quotes the end of its log. Call it from a
 * thread that lives as long as the server should (the parent-death signal
 * follows the starting thread). */
dk_status kg_redis_auto_start(kg_redis_auto *ra, double timeout_s);
/* The same on TCP at kg_routable_address() (see above); fails (runtime)
 * when this host has no routable address. A restart keeps the port. */
dk_status kg_redis_auto_start_tcp(kg_redis_auto *ra, double timeout_s);
void kg_redis_auto_stop(kg_redis_auto *ra);
/* 1 while the server runs; 0 once it has exited (reaped: how then says how,
 * with the end of its log, so a log names the true cause). */
int kg_redis_auto_alive(kg_redis_auto *ra, char *how, size_t n);
/* Starts it again (stopping it first if it still runs) and waits up to
 * timeout_s for it to answer, its AOF loaded. Only its starter may. */
dk_status kg_redis_auto_restart(kg_redis_auto *ra, double timeout_s);

/* An IPv4 address of this host that other nodes can reach: what the host
 * name resolves to when that is not loopback, else the first interface that
 * is up and not loopback. Fails (runtime) when there is none. */
dk_status kg_routable_address(char *out, size_t n);

/* 1 when redis-server can be found in PATH. */
int kg_redis_server_available(void);

#endif
