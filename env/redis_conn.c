/* redis_conn.c: URL parsing and hiredis connection set-up. */
#define _POSIX_C_SOURCE 200809L
#include "env/redis_conn.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes s[0..n) with percent escapes into out (size cap). */
static dk_status decode(const char *s, size_t n, char *out, size_t cap, const char *what) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) return dk_fail(DK_ERR_USAGE, "redis URL: bad percent escape in the %s", what);
            c = hi * 16 + lo;
            i += 2;
        }
        if (o + 1 >= cap) return dk_fail(DK_ERR_USAGE, "redis URL: the %s is too long", what);
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return DK_OK;
}

static dk_status parse_int(const char *s, size_t n, int lo, int hi, int *out, const char *what) {
    if (n == 0 || n > 9) return dk_fail(DK_ERR_USAGE, "redis URL: bad %s '%.*s'", what, (int)n, s);
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return dk_fail(DK_ERR_USAGE, "redis URL: bad %s '%.*s'", what, (int)n, s);
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return dk_fail(DK_ERR_USAGE, "redis URL: %s %d out of range [%d, %d]", what, v, lo, hi);
    *out = v;
    return DK_OK;
}

/* "[user]:password"; a bare "user" sets only the user name. */
static dk_status parse_userinfo(const char *s, size_t n, kg_redis_url *u) {
    const char *colon = memchr(s, ':', n);
    if (!colon) return decode(s, n, u->user, sizeof u->user, "user");
    DK_TRY(decode(s, (size_t)(colon - s), u->user, sizeof u->user, "user"));
    return decode(colon + 1, n - (size_t)(colon - s) - 1, u->password, sizeof u->password, "password");
}

static dk_status parse_query(const char *q, kg_redis_url *u) {
    while (*q) {
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', n);
        if (!eq) return dk_fail(DK_ERR_USAGE, "redis URL: query item '%.*s' has no '='", (int)n, q);
        size_t kn = (size_t)(eq - q), vn = n - kn - 1;
        if (kn == 8 && strncmp(q, "password", 8) == 0)
            DK_TRY(decode(eq + 1, vn, u->password, sizeof u->password, "password"));
        else if (kn == 2 && strncmp(q, "db", 2) == 0)
            DK_TRY(parse_int(eq + 1, vn, 0, 1 << 20, &u->db, "database number"));
        else
            return dk_fail(DK_ERR_USAGE, "redis URL: unknown query parameter '%.*s' (expected password or db)", (int)kn, q);
        q += n + (amp ? 1 : 0);
    }
    return DK_OK;
}

dk_status kg_redis_url_parse(const char *url, kg_redis_url *u) {
    memset(u, 0, sizeof *u);
    u->port = 6379;
    if (!url || !*url) return dk_fail(DK_ERR_USAGE, "redis URL: empty");
    char buf[2048];
    if (strlen(url) >= sizeof buf) return dk_fail(DK_ERR_USAGE, "redis URL: too long");
    strcpy(buf, url);
    char *query = strchr(buf, '?');
    if (query) *query++ = '\0';
    char *rest;
    if (strncmp(buf, "unix://", 7) == 0) {
        u->is_unix = 1;
        rest = buf + 7;
        if (*rest != '/') {
            char *at = strchr(rest, '@');
            if (!at || at[1] != '/')
                return dk_fail(DK_ERR_USAGE, "redis URL: expected unix:///path/to/socket, got a relative path");
            DK_TRY(parse_userinfo(rest, (size_t)(at - rest), u));
            rest = at + 1;
        }
        if (strlen(rest) < 2) return dk_fail(DK_ERR_USAGE, "redis URL: empty socket path");
        if (strlen(rest) >= sizeof u->path) return dk_fail(DK_ERR_USAGE, "redis URL: socket path too long");
        strcpy(u->path, rest);
    } else if (strncmp(buf, "redis://", 8) == 0) {
        rest = buf + 8;
        char *slash = strchr(rest, '/');
        if (slash) {
            *slash = '\0';
            if (slash[1]) DK_TRY(parse_int(slash + 1, strlen(slash + 1), 0, 1 << 20, &u->db, "database number"));
        }
        char *at = strrchr(rest, '@');
        if (at) {
            DK_TRY(parse_userinfo(rest, (size_t)(at - rest), u));
            rest = at + 1;
        }
        char *port = NULL;
        if (*rest == '[') { /* [IPv6]:port */
            char *close = strchr(rest, ']');
            if (!close) return dk_fail(DK_ERR_USAGE, "redis URL: unterminated '[' in the host");
            *close = '\0';
            rest++;
            if (close[1] == ':') port = close + 2;
            else if (close[1]) return dk_fail(DK_ERR_USAGE, "redis URL: junk after ']' in the host");
        } else {
            port = strchr(rest, ':');
            if (port) *port++ = '\0';
        }
        if (!*rest) return dk_fail(DK_ERR_USAGE, "redis URL: empty host");
        if (strlen(rest) >= sizeof u->host) return dk_fail(DK_ERR_USAGE, "redis URL: host too long");
        strcpy(u->host, rest);
        if (port) DK_TRY(parse_int(port, strlen(port), 1, 65535, &u->port, "port"));
    } else if (strncmp(buf, "rediss://", 9) == 0) {
        return dk_fail(DK_ERR_USAGE, "redis URL: TLS (rediss://) is not supported by this build; use redis:// or unix://");
    } else {
        char shown[256];
        kg_redis_url_redact(url, shown, sizeof shown);
        return dk_fail(DK_ERR_USAGE, "redis URL '%s': expected redis://host:port, unix:///path or auto", shown);
    }
    if (query) DK_TRY(parse_query(query, u));
    return DK_OK;
}

static int is_loopback(const char *host) {
    return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1") ||
           !strcmp(host, "0:0:0:0:0:0:0:1");
}

dk_status kg_redis_url_check_exposure(const kg_redis_url *u, int insecure, const char *allow) {
    if (u->is_unix || u->password[0] || is_loopback(u->host)) return DK_OK;
    if (!insecure)
        return dk_fail(DK_ERR_USAGE,
                       "redis://%s:%d has no password on a non-loopback address: anyone who can reach it can read "
                       "jobs and forge results; add a password to the URL (and requirepass to Redis), or pass %s",
                       u->host, u->port, allow);
    fprintf(stderr, "warning: redis://%s:%d is used without a password on a non-loopback address (%s)\n", u->host,
            u->port, allow);
    return DK_OK;
}

void kg_redis_url_redact(const char *url, char *out, size_t n) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", url ? url : "");
    /* user info: between "://" and the '@' */
    char *scheme = strstr(buf, "://");
    char *at = scheme ? strchr(scheme + 3, '@') : NULL;
    char res[2048];
    if (at) {
        char *colon = memchr(scheme + 3, ':', (size_t)(at - scheme - 3));
        if (colon)
            snprintf(res, sizeof res, "%.*s:***%s", (int)(colon - buf), buf, at);
        else
            snprintf(res, sizeof res, "%s", buf);
    } else {
        snprintf(res, sizeof res, "%s", buf);
    }
    char *pw = strstr(res, "password=");
    if (pw) {
        char *end = strchr(pw, '&');
        char tail[2048];
        snprintf(tail, sizeof tail, "%s", end ? end : "");
        snprintf(pw + 9, sizeof res - (size_t)(pw + 9 - res), "***%s", tail);
    }
    snprintf(out, n, "%s", res);
}

static struct timeval to_tv(double s) {
    struct timeval tv;
    if (s < 0.001) s = 0.001;
    tv.tv_sec = (time_t)s;
    tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
    return tv;
}

void kg_redis_set_timeout(redisContext *c, double timeout_s) { redisSetTimeout(c, to_tv(timeout_s)); }

static const char *where(const kg_redis_url *u, char *buf, size_t n) {
    if (u->is_unix)
        snprintf(buf, n, "unix://%s", u->path);
    else
        snprintf(buf, n, "redis://%s:%d", u->host, u->port);
    return buf;
}

dk_status kg_redis_connect(const kg_redis_url *u, double timeout_s, redisContext **out) {
    *out = NULL;
    char w[1200];
    where(u, w, sizeof w);
    struct timeval tv = to_tv(timeout_s);
    redisContext *c = u->is_unix ? redisConnectUnixWithTimeout(u->path, tv) : redisConnectWithTimeout(u->host, u->port, tv);
    if (!c) return dk_fail(DK_ERR_RUNTIME, "redis %s: cannot allocate a connection", w);
    if (c->err) {
        dk_status s = dk_fail(DK_ERR_RUNTIME, "redis %s: cannot connect: %s", w, c->errstr);
        redisFree(c);
        return s;
    }
    redisSetTimeout(c, tv);
    redisReply *r = NULL;
    if (u->password[0]) {
        r = u->user[0] ? redisCommand(c, "AUTH %s %s", u->user, u->password) : redisCommand(c, "AUTH %s", u->password);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            /* No reply is a connection that dropped (a server going down),
             * not a refused password: say which. */
            dk_status s = r ? dk_fail(DK_ERR_RUNTIME, "redis %s: authentication failed: %s", w, r->str)
                            : dk_fail(DK_ERR_RUNTIME, "redis %s: the connection dropped before authenticating: %s", w,
                                      c->errstr[0] ? c->errstr : "no reply");
            if (r) freeReplyObject(r);
            redisFree(c);
            return s;
        }
        freeReplyObject(r);
    }
    r = u->db ? redisCommand(c, "SELECT %d", u->db) : redisCommand(c, "PING");
    if (!r || r->type == REDIS_REPLY_ERROR) {
        const char *msg = r ? r->str : c->errstr;
        dk_status s = strstr(msg, "NOAUTH")
                          ? dk_fail(DK_ERR_RUNTIME, "redis %s: the server needs a password (add it to the URL)", w)
                          : dk_fail(DK_ERR_RUNTIME, "redis %s: %s", w, msg);
        if (r) freeReplyObject(r);
        redisFree(c);
        return s;
    }
    freeReplyObject(r);
    *out = c;
    return DK_OK;
}

static redisReply *check_reply(redisContext *c, redisReply *r, const char *cmd) {
    char name[32];
    size_t n = 0;
    while (cmd[n] && cmd[n] != ' ' && n + 1 < sizeof name) {
        name[n] = cmd[n];
        n++;
    }
    name[n] = '\0';
    if (!r) {
        dk_fail(DK_ERR_RUNTIME, "redis %s: %s", name, c->errstr[0] ? c->errstr : "connection lost");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        dk_fail(DK_ERR_RUNTIME, "redis %s: %s", name, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

redisReply *kg_redis_cmd(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    return check_reply(c, r, fmt);
}

redisReply *kg_redis_argv(redisContext *c, int argc, const char **argv, const size_t *lens) {
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    return check_reply(c, r, argc > 0 ? argv[0] : "");
}
