/* test_hf_config.c: model/hf_config.c against transformers. Every config.json
 * under tests/fixtures/config/ is read and compared field by field with what
 * transformers made of the same file (expected.json, from
 * tests/make_config_fixtures.py), parameter count included; broken and
 * unsupported files must fail with a message naming the file and the field;
 * model_config_to_hf must read back identically.
 *
 * With `--export DIR` it instead writes, for each fixture and for the model of
 * each shipped ini file in configs/, DIR/<name>/config.json (model_config_to_hf) and
 * DIR/<name>/dk.json (our reading of it), for test_config_hf_roundtrip.sh to
 * load with transformers. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/util.h"
#include "model/config.h"
#include "trainer/config.h"
#include "tests/check.h"

#define FIXTURES "tests/fixtures/config"

/* The fields of a model_config as name/value pairs, in expected.json's terms. */
typedef struct {
    const char *name;
    double value;
} field_value;

static int config_fields(const model_config *c, field_value *f) {
    int n = 0;
#define F(name, v) f[n++] = (field_value){name, (double)(v)}
    F("vocab_size", c->vocab_size);
    F("hidden_size", c->hidden_size);
    F("intermediate_size", c->intermediate_size);
    F("n_layers", c->n_layers);
    F("n_heads", c->n_heads);
    F("n_kv_heads", c->n_kv_heads);
    F("head_dim", c->head_dim);
    F("max_position", c->max_position);
    F("rope_theta", c->rope_theta);
    F("rms_eps", c->rms_eps);
    F("tie_embeddings", c->tie_embeddings);
    F("qkv_bias", c->qkv_bias);
    F("o_bias", c->o_bias);
    F("qk_norm", c->qk_norm);
    F("bos_token_id", c->bos_token_id);
    F("eos_token_id", c->eos_token_id);
    F("n_params", model_config_n_params(c));
#undef F
    return n;
}

static void compare_with_expected(const char *name, const model_config *c, const cJSON *exp) {
    field_value f[32];
    int n = config_fields(c, f);
    const cJSON *arch = cJSON_GetObjectItem(exp, "arch");
    CHECK(cJSON_IsString(arch) && !strcmp(arch->valuestring, model_arch_name(c->arch)), "%s: arch %s", name,
          model_arch_name(c->arch));
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetObjectItem(exp, f[i].name);
        CHECK(cJSON_IsNumber(e), "%s: expected.json lacks %s", name, f[i].name);
        if (!cJSON_IsNumber(e)) continue;
        /* floats are stored as float: compare at float precision */
        double want = !strcmp(f[i].name, "rope_theta") || !strcmp(f[i].name, "rms_eps") ? (float)e->valuedouble
                                                                                          : e->valuedouble;
        CHECK(f[i].value == want, "%s: %s = %.17g, transformers says %.17g", name, f[i].name, f[i].value, want);
    }
}

static cJSON *load_expected(void) {
    char *text;
    if (dk_read_file(FIXTURES "/expected.json", &text, NULL)) {
        printf("FAIL %s\n", dk_error());
        exit(1);
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) {
        printf("FAIL cannot parse " FIXTURES "/expected.json\n");
        exit(1);
    }
    return j;
}

/* Writes text to DIR/config.json and reads it back; returns the status. */
static dk_status read_text(const char *dir, const char *text, model_config *c) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (dk_write_file(path, text, strlen(text))) return DK_ERR_RUNTIME;
    return model_config_from_hf(dir, c);
}

/* A small valid Qwen3 file; each bad case changes one field. */
static const char *base_json =
    "{\"model_type\": \"qwen3\", \"vocab_size\": 128, \"hidden_size\": 64, \"intermediate_size\": 96,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16,"
    " \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000, \"rope_scaling\": null,"
    " \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"eos_token_id\": [5, 6]}";

static void check_errors(const char *tmp) {
    static const struct {
        const char *key, *value;       /* value NULL: the field is removed; key NULL: value is the whole file */
        const char *expect1, *expect2; /* both must appear in the message */
    } cases[] = {
        {"rope_scaling", "{\"type\": \"yarn\", \"factor\": 4.0}", "rope_scaling", "yarn"},
        {"rope_parameters", "{\"rope_type\": \"linear\", \"factor\": 2.0}", "rope_parameters", "linear"},
        {"model_type", "\"mistral\"", "model_type", "mistral"},
        {"hidden_size", "\"64\"", "hidden_size", "integer"},
        {"hidden_size", NULL, "hidden_size", "missing"},
        {"rope_theta", NULL, "rope_theta", "missing"},
        {"head_dim", "null", "head_dim", "missing"},
        {"num_key_value_heads", "3", "n_heads = 4", "n_kv_heads = 3"},
        {"use_sliding_window", "true", "use_sliding_window", "sliding"},
        {"hidden_act", "\"gelu\"", "hidden_act", "silu"},
        {"eos_token_id", "128", "eos_token_id", "vocabulary"},
        {NULL, "{\"model_type\": \"qwen3\", ", "config.json", "JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text;
        if (cases[i].key) {
            cJSON *o = cJSON_Parse(base_json);
            cJSON_DeleteItemFromObject(o, cases[i].key);
            if (cases[i].value) cJSON_AddItemToObject(o, cases[i].key, cJSON_Parse(cases[i].value));
            text = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
        } else {
            text = dk_strdup(cases[i].value);
        }
        model_config c;
        dk_status s = read_text(tmp, text, &c);
        free(text);
        const char *msg = dk_error();
        CHECK(s == DK_ERR_RUNTIME && strstr(msg, "config.json") && strstr(msg, cases[i].expect1) &&
                  strstr(msg, cases[i].expect2),
              "case %zu: status %d, message '%s'", i, s, msg);
        printf("  error: %s\n", msg);
    }
    /* the base itself is fine, and eos takes the first of the list */
    model_config c;
    CHECK(read_text(tmp, base_json, &c) == DK_OK && c.eos_token_id == 5 && c.bos_token_id == -1, "base: %s",
          dk_error());
    /* a missing directory names the path */
    dk_status s = model_config_from_hf("/nonexistent/ckpt", &c);
    CHECK(s == DK_ERR_USAGE && strstr(dk_error(), "/nonexistent/ckpt/config.json"), "missing file: %s", dk_error());
    /* what a family cannot express is refused on writing */
    model_config q2 = c;
    q2.arch = DK_ARCH_QWEN2, q2.qk_norm = 0, q2.qkv_bias = 1, q2.o_bias = 1;
    char out[512];
    snprintf(out, sizeof out, "%s/out.json", tmp);
    s = model_config_to_hf(&q2, out, "bfloat16");
    CHECK(s == DK_ERR_USAGE && strstr(dk_error(), "o_bias"), "qwen2 with o_bias: %s", dk_error());
}

static dk_status export_one(const char *dir, const char *name, const model_config *c) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    DK_TRY(dk_mkdirs(path));
    DK_TRY(model_config_to_hf(c, path, "bfloat16"));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "arch", model_arch_name(c->arch));
    field_value f[32];
    int n = config_fields(c, f);
    for (int i = 0; i < n; i++) cJSON_AddNumberToObject(o, f[i].name, f[i].value);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/%s/dk.json", dir, name);
    dk_status s = dk_write_file(path, text, strlen(text));
    cJSON_free(text);
    return s;
}

static int export_all(const char *dir, const cJSON *expected) {
    const cJSON *e;
    cJSON_ArrayForEach(e, expected) {
        char src[512];
        snprintf(src, sizeof src, FIXTURES "/%s", e->string);
        model_config c;
        if (model_config_from_hf(src, &c) || export_one(dir, e->string, &c)) {
            printf("FAIL export %s: %s\n", e->string, dk_error());
            return 1;
        }
    }
    const char *inis[] = {"tiny-sft", "drkernel8b", "drkernel14b"};
    for (int i = 0; i < 3; i++) {
        char path[256], name[64];
        snprintf(path, sizeof path, "configs/%s.ini", inis[i]);
        snprintf(name, sizeof name, "ini_%s", inis[i]);
        dk_config cfg;
        model_config c;
        if (config_load(&cfg, path, 0, NULL) || config_model(&cfg, &c) || export_one(dir, name, &c)) {
            printf("FAIL export %s: %s\n", path, dk_error());
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    cJSON *expected = load_expected();
    if (argc == 3 && !strcmp(argv[1], "--export")) {
        int rc = export_all(argv[2], expected);
        cJSON_Delete(expected);
        return rc;
    }
    char tmp[] = "/tmp/dk_hf_config_XXXXXX";
    if (!mkdtemp(tmp)) return 1;

    int n_cases = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, expected) {
        char dir[512], out[600];
        snprintf(dir, sizeof dir, FIXTURES "/%s", e->string);
        model_config c, back;
        dk_status s = model_config_from_hf(dir, &c);
        CHECK(s == DK_OK, "%s: %s", e->string, dk_error());
        if (s) continue;
        compare_with_expected(e->string, &c, e);
        /* write and read back: identical */
        snprintf(out, sizeof out, "%s/%s.json", tmp, e->string);
        s = model_config_to_hf(&c, out, "bfloat16");
        if (s == DK_OK) s = model_config_from_hf(out, &back);
        CHECK(s == DK_OK && !memcmp(&c, &back, sizeof c), "%s: round trip through model_config_to_hf: %s", e->string,
              s ? dk_error() : "fields differ");
        printf("  %-14s %-5s C=%-5d L=%-2d H=%d/%d D=%-3d V=%-6d params %zu\n", e->string, model_arch_name(c.arch),
               c.hidden_size, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size,
               model_config_n_params(&c));
        n_cases++;
    }
    check_errors(tmp);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmp);
    cJSON_Delete(expected);
    printf("%d fixtures compared with transformers, %s\n", n_cases, failures ? "FAILED" : "all fields equal");
    return failures ? 1 : 0;
}
