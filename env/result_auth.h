/* result_auth.h: results on the KernelGym queue are authenticated. A worker
 * appends an HMAC-SHA256 of the result's JSON text as its last member,
 * "auth"; a client checks it before it reads the result. Nothing a job's
 * sandbox can reach holds the key: it comes from $DK_KG_RESULT_KEY_FILE (a
 * file the worker and the client read, hidden from the sandbox) or, without
 * one, from the Redis password (which the sandbox cannot see either: it is in
 * no file, no environment and no process it can read). So a forged result
 * pushed into the queue by a job that reached Redis anyway is refused.
 *
 * The tag covers the exact bytes of the JSON text (no re-serialisation):
 *   signed = TEXT without its closing '}' + ",\"auth\":\"<64 hex>\"}"
 * With no key at all (no key file, a Redis without a password) results are
 * neither signed nor checked. */
#ifndef KG_RESULT_AUTH_H
#define KG_RESULT_AUTH_H

#include <stddef.h>

#include "common/error.h"

#define KG_AUTH_KEY_BYTES 32

typedef struct {
    unsigned char key[KG_AUTH_KEY_BYTES];
    int have; /* 0: no key (results pass unsigned) */
} kg_result_key;

/* The key: SHA-256 of $DK_KG_RESULT_KEY_FILE's contents (at least 16 bytes)
 * when that is set, else SHA-256 of a fixed label and redis_password when it
 * is not empty, else none. Fails (naming the file) on an unreadable or
 * too short key file. */
dk_status kg_result_key_load(kg_result_key *k, const char *redis_password);

/* HMAC-SHA256 of data under key, as 64 lowercase hex digits + NUL. */
void kg_hmac_sha256_hex(const unsigned char *key, size_t key_n, const void *data, size_t n, char out[65]);

/* json (malloc'd, a JSON object's text) with its tag appended; json is
 * freed. Without a key, json itself. */
char *kg_result_auth_sign(const kg_result_key *k, char *json);

/* Checks json's tag and strips it in place: DK_OK, or an error saying why
 * (no tag, a tag that does not match). Without a key, DK_OK. */
dk_status kg_result_auth_verify(const kg_result_key *k, char *json);

/* What a client does with a result read from the queue for job id: json
 * with its tag stripped when it verifies, else (json freed) a new error
 * result naming why it was refused. */
char *kg_result_auth_accept(const kg_result_key *k, const char *id, char *json);

#endif
