/* proc_util.h: child-process chores shared by the pieces of KernelGym that
 * start other programs (the harness server, a private redis-server, the
 * workers of a local fleet): own process group, death with the parent,
 * bounded waits, terminate-then-kill. */
#ifndef KG_PROC_UTIL_H
#define KG_PROC_UTIL_H

#include <stddef.h>
#include <sys/types.h>

/* In a freshly forked child: own process group (so a group kill reaches only
 * its descendants and a terminal ^C does not), and a signal when the parent
 * dies (so nothing outlives a killed worker). parent = getpid() before fork. */
void kg_child_setup(pid_t parent, int death_signal);

/* Waits up to timeout_s for pid to exit; 1 and *wstatus when it did, 0 when
 * it is still running (or was already reaped: -1 in *wstatus). */
int kg_wait_exit(pid_t pid, double timeout_s, int *wstatus);

/* SIGTERM (to the group when group != 0), up to grace_s to exit, then SIGKILL,
 * and reaps it. Returns the wait status (-1 when it could not be reaped). */
int kg_terminate(pid_t pid, int group, double grace_s);

/* "exit code 1" or "killed by signal 11 (Segmentation fault)". */
void kg_describe_exit(int wstatus, char *buf, size_t n);

/* Full path of an executable found in $PATH; 0 when there is none. */
int kg_find_in_path(const char *name, char *out, size_t n);

/* The machine's short host name ("localhost" when it cannot be read). */
void kg_hostname(char *out, size_t n);

/* n random bytes as 2n lowercase hex digits (from /dev/urandom, falling back
 * to time and pid mixing when it cannot be read). */
void kg_random_hex(char *out, size_t n_bytes);

/* Sets SIGPIPE to ignored when it has its default action: a write to a dead
 * server or a dropped Redis socket must fail with EPIPE, not kill us. */
void kg_ignore_sigpipe(void);

#endif
