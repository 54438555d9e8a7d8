/* redis_conn.h: Redis URLs and authenticated hiredis connections.
 *
 *   redis://[[user]:password@]host[:port][/db][?password=P&db=N]
 *   unix:///path/to/socket[?password=P&db=N]
 *   unix://[[user]:password@]/path/to/socket
 *
 * Percent escapes (%40 for '@') are decoded in the user, password and query
 * values. Messages and logs show the URL through kg_redis_url_redact, never
 * with its password. */
#ifndef KG_REDIS_CONN_H
#define KG_REDIS_CONN_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "common/error.h"

typedef struct {
    int is_unix;
    char host[256];
    int port;
    char path[1024];
    char user[128];
    char password[512];
    int db;
} kg_redis_url;

dk_status kg_redis_url_parse(const char *url, kg_redis_url *out);
/* A Redis reached over TCP on a non-loopback address without a password lets
 * anyone on the network read jobs and forge results: refused (DK_ERR_USAGE,
 * naming the flag or key that allows it, `allow`) unless insecure is set, in
 * which case a warning goes to stderr. Unix sockets and loopback pass. */
dk_status kg_redis_url_check_exposure(const kg_redis_url *u, int insecure, const char *allow);
/* Writes the URL back with the password replaced by "***". */
void kg_redis_url_redact(const char *url, char *out, size_t n);

/* Connects (connect and per-command timeout timeout_s), authenticates and
 * selects the database. On failure *out is NULL and the message names the
 * redacted URL. */
dk_status kg_redis_connect(const kg_redis_url *u, double timeout_s, redisContext **out);
/* Changes the per-command timeout (a blocking command must fit inside it). */
void kg_redis_set_timeout(redisContext *c, double timeout_s);

/* Runs a command; NULL on a connection failure or an error reply, with the
 * message set ("redis LPUSH: ..."). The caller frees the reply. */
redisReply *kg_redis_cmd(redisContext *c, const char *fmt, ...);
redisReply *kg_redis_argv(redisContext *c, int argc, const char **argv, const size_t *lens);

#endif
