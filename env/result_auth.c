/* result_auth.c: the HMAC on KernelGym results (see result_auth.h), with
 * OpenSSL's libcrypto for SHA-256 and HMAC. */
#include "env/result_auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "common/util.h"
#include "env/result.h"

#define KEY_LABEL "drkernel kernelgym result key v1"
#define TAG_HEAD ",\"auth\":\""
#define TAG_LEN (sizeof TAG_HEAD - 1 + 64 + 2) /* head, 64 hex, quote, brace */

dk_status kg_result_key_load(kg_result_key *k, const char *redis_password) {
    memset(k, 0, sizeof *k);
    const char *path = getenv("DK_KG_RESULT_KEY_FILE");
    if (path && *path) {
        FILE *f = fopen(path, "rb");
        if (!f) return dk_fail(DK_ERR_USAGE, "DK_KG_RESULT_KEY_FILE %s: %s", path, strerror(errno));
        unsigned char buf[4096];
        size_t n = fread(buf, 1, sizeof buf, f);
        int bad = ferror(f);
        fclose(f);
        if (bad) return dk_fail(DK_ERR_USAGE, "DK_KG_RESULT_KEY_FILE %s: read error", path);
        if (n < 16) {
            OPENSSL_cleanse(buf, sizeof buf);
            return dk_fail(DK_ERR_USAGE, "DK_KG_RESULT_KEY_FILE %s: a key needs at least 16 bytes, the file has %zu",
                           path, n);
        }
        SHA256(buf, n, k->key);
        OPENSSL_cleanse(buf, sizeof buf);
        k->have = 1;
        return DK_OK;
    }
    if (redis_password && *redis_password) {
        size_t n = strlen(redis_password);
        unsigned char *buf = dk_malloc(sizeof KEY_LABEL + n);
        memcpy(buf, KEY_LABEL, sizeof KEY_LABEL); /* the NUL separates label and password */
        memcpy(buf + sizeof KEY_LABEL, redis_password, n);
        SHA256(buf, sizeof KEY_LABEL + n, k->key);
        OPENSSL_cleanse(buf, sizeof KEY_LABEL + n);
        free(buf);
        k->have = 1;
    }
    return DK_OK;
}

void kg_hmac_sha256_hex(const unsigned char *key, size_t key_n, const void *data, size_t n, char out[65]) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), key, (int)key_n, data, n, mac, &len) || len != 32)
        DK_ABORT("HMAC-SHA256 failed in libcrypto");
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[mac[i] >> 4];
        out[2 * i + 1] = hex[mac[i] & 15];
    }
    out[64] = 0;
}

/* The length of json without trailing whitespace; its last byte must be '}'. */
static size_t body_end(const char *json) {
    size_t n = strlen(json);
    while (n > 0 && (json[n - 1] == ' ' || json[n - 1] == '\n' || json[n - 1] == '\r' || json[n - 1] == '\t')) n--;
    return n;
}

char *kg_result_auth_sign(const kg_result_key *k, char *json) {
    if (!k->have) return json;
    size_t n = body_end(json);
    if (n == 0 || json[n - 1] != '}') DK_ABORT("kg_result_auth_sign: the result is not a JSON object");
    if (n < 3) DK_ABORT("kg_result_auth_sign: an empty result");
    char tag[65];
    kg_hmac_sha256_hex(k->key, sizeof k->key, json, n, tag);
    char *out = dk_malloc(n - 1 + TAG_LEN + 1);
    memcpy(out, json, n - 1);
    snprintf(out + n - 1, TAG_LEN + 1, TAG_HEAD "%s\"}", tag);
    free(json);
    return out;
}

dk_status kg_result_auth_verify(const kg_result_key *k, char *json) {
    if (!k->have) return DK_OK;
    size_t n = body_end(json);
    size_t head = sizeof TAG_HEAD - 1;
    if (n < TAG_LEN + 1 || memcmp(json + n - TAG_LEN, TAG_HEAD, head) != 0 || json[n - 2] != '"' || json[n - 1] != '}')
        return dk_fail(DK_ERR_RUNTIME, "the result carries no authentication tag");
    char got[65];
    memcpy(got, json + n - TAG_LEN + head, 64);
    got[64] = 0;
    /* The signed text: everything before the tag, closed again. */
    size_t body = n - TAG_LEN;
    char saved = json[body];
    json[body] = '}';
    char want[65];
    kg_hmac_sha256_hex(k->key, sizeof k->key, json, body + 1, want);
    if (CRYPTO_memcmp(got, want, 64) != 0) {
        json[body] = saved;
        return dk_fail(DK_ERR_RUNTIME, "the result's authentication tag does not match (forged or altered)");
    }
    json[body + 1] = 0;
    return DK_OK;
}

char *kg_result_auth_accept(const kg_result_key *k, const char *id, char *json) {
    if (kg_result_auth_verify(k, json) == DK_OK) return json;
    char msg[300];
    snprintf(msg, sizeof msg, "the result from the queue was refused: %s", dk_error());
    dk_error_clear();
    free(json);
    cJSON *e = kg_result_make_error(id, KG_STATUS_ERROR, msg);
    char *out = cJSON_PrintUnformatted(e);
    cJSON_Delete(e);
    if (!out) DK_ABORT("cJSON_PrintUnformatted: out of memory");
    return out;
}
