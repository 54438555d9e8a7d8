/* server_proc.h: the warm harness server as a child process (the KernelGym
 * contract): `python -m env.harness.server` with cwd = the source root, job
 * lines on its stdin, result lines on fd 3 (a private pipe: the server's own
 * stdout goes to our stderr, so nothing a candidate prints can pose as a
 * result), its own process group, killed if we die. One request at a time,
 * each with a deadline; a server that hangs or dies is reported so the caller
 * can kill and restart it. */
#ifndef KG_SERVER_PROC_H
#define KG_SERVER_PROC_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"

typedef struct {
    char python[4096];      /* the interpreter */
    char source_root[4096]; /* cwd and PYTHONPATH of the server */
    char script[4096];      /* when set, `python SCRIPT` replaces `-m env.harness.server` */
    char cuda_visible[256]; /* CUDA_VISIBLE_DEVICES for the server; "" leaves it alone */
    double ready_timeout_s; /* how long the warm-up may take (180) */
} kg_server_config;

/* Defaults from the environment: the source root is $DK_SOURCE, else the
 * first folder holding env/harness/ found upwards from this executable or the
 * cwd; the interpreter is $DK_PYTHON, else SOURCE/.venv/bin/python, else
 * python3 from PATH; the script is $KERNELGYM_SERVER (a path relative to the
 * source root or absolute: a stand-in server speaking the same protocol). */
void kg_server_config_default(kg_server_config *c);

typedef struct {
    pid_t pid; /* 0: not running */
    int to_fd, from_fd;
    char *buf; /* bytes read from fd 3 not yet consumed */
    size_t len, cap;
    int cuda; /* from the ready line */
    char ready_line[512];
    double last_answer; /* dk_now() of the last line read from it */
    kg_server_config cfg;
} kg_server;

typedef enum {
    KG_SERVER_OK = 0,
    KG_SERVER_TIMEOUT,     /* no answer before the deadline */
    KG_SERVER_DIED,        /* it exited or closed fd 3 */
    KG_SERVER_INTERRUPTED, /* *stop became nonzero while waiting */
} kg_server_outcome;

void kg_server_init(kg_server *s, const kg_server_config *cfg);
/* Spawns it and waits for the ready line; on failure nothing is left running
 * and the message quotes what went wrong (exit status, timeout). */
dk_status kg_server_start(kg_server *s);
int kg_server_running(const kg_server *s);
/* 0 when it has exited (it is then reaped and cleaned up, and why says how);
 * 1 while its process runs. */
int kg_server_alive(kg_server *s, char *why, size_t why_n);
/* Sends {"kind":"ping"} and expects {"pong":true} within timeout_s. */
kg_server_outcome kg_server_ping(kg_server *s, double timeout_s, char *why, size_t why_n);
/* Writes one line (no newline inside; one is appended) and reads the next
 * reply line into *reply (malloc'd). On anything but KG_SERVER_OK, why holds
 * a one-line description and the caller should kg_server_kill it. */
kg_server_outcome kg_server_request(kg_server *s, const char *line, double timeout_s, const volatile sig_atomic_t *stop,
                                    char **reply, char *why, size_t why_n);
/* Closes its stdin (it exits on EOF), waits up to grace_s, then kills the group. */
void kg_server_stop(kg_server *s, double grace_s);
/* Stops it now: SIGTERM to its process group, SIGKILL after 2 s, reaped. */
void kg_server_kill(kg_server *s);

#endif
