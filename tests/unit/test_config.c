/* test_config.c: the run configuration (trainer/config.c). Small ini files
 * written to a temp dir check every error message exactly (unknown section
 * and key with suggestions, bad int/float/bool/enum values, ranges, missing
 * file, duplicates, syntax, overrides, cross-key rules); derived values;
 * save -> load giving the identical config; and that every shipped
 * configs/ ini file loads, with drkernel8b/14b describing exactly the published
 * Qwen3-8B/14B config.json files (tests/fixtures/config/). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "trainer/config.h"
#include "trainer/config_keys.h"
#include "tests/check.h"

static char tmp[] = "/tmp/dk_config_XXXXXX";

/* Writes tmp/name and returns its path (static buffer, one at a time). */
static const char *ini(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    if (dk_write_file(path, text, strlen(text))) {
        printf("FAIL cannot write %s\n", path);
        exit(1);
    }
    return path;
}

/* A complete minimal model, so tests of other sections load. */
#define MODEL                                                                                       \
    "[model]\nvocab_size = 64\nhidden_size = 32\nintermediate_size = 48\nn_layers = 1\nn_heads = 4\n" \
    "max_position = 4096\n"

/* Loads path with overrides and checks the status and the exact message
 * (`want` with %s or %1$s standing for the path of the file; a trailing '*'
 * makes it a prefix). */
static void expect(int line, const char *path, int n, const char *const *ov, dk_status code, const char *want) {
    dk_config cfg;
    dk_status s = config_load(&cfg, path, n, (char **)ov);
    char full[1024];
    snprintf(full, sizeof full, want, path);
    size_t len = strlen(full);
    bool prefix = len && full[len - 1] == '*';
    if (prefix) full[--len] = '\0';
    checks++;
    if (s != code || (code && (prefix ? strncmp(dk_error(), full, len) : strcmp(dk_error(), full)))) {
        failures++;
        printf("FAIL %s:%d: status %d (want %d)\n  got:  %s\n  want: %s\n", __FILE__, line, s, code,
               s ? dk_error() : "", full);
    } else if (code) {
        printf("  ok: %s\n", dk_error());
    }
}
#define EXPECT_FILE(text, code, want) expect(__LINE__, ini("t.ini", text), 0, NULL, code, want)
#define EXPECT_OV(path, code, want, ...)                                                   \
    do {                                                                                   \
        const char *const ov_[] = {__VA_ARGS__};                                           \
        expect(__LINE__, path, (int)(sizeof ov_ / sizeof ov_[0]), ov_, code, want);         \
    } while (0)

static void test_file_errors(void) {
    EXPECT_FILE("[train]\nlerning_rate = 1e-3\n", DK_ERR_USAGE,
                "%s:2: unknown key 'lerning_rate' in [train] (did you mean 'lr'?)");
    EXPECT_FILE("[run]\nstesp = 10\n", DK_ERR_USAGE, "%s:2: unknown key 'stesp' in [run] (did you mean 'steps'?)");
    EXPECT_FILE("[train]\n\ntemperature = 0.7\n", DK_ERR_USAGE,
                "%s:3: unknown key 'temperature' in [train] (did you mean 'temperature' in [rl]?)");
    EXPECT_FILE("[model]\nnum_hidden_layers = 4\n", DK_ERR_USAGE,
                "%s:2: unknown key 'num_hidden_layers' in [model] (did you mean 'n_layers'?)");
    EXPECT_FILE("[run]\nxyzzy = 1\n", DK_ERR_USAGE, "%s:2: unknown key 'xyzzy' in [run]");
    EXPECT_FILE("[run]\nmode = sft\n\n[trian]\nlr = 1e-3\n", DK_ERR_USAGE,
                "%s:4: unknown section [trian] (did you mean [train]?)");
    EXPECT_FILE("; an empty section is still checked\n[optimizer]\n", DK_ERR_USAGE,
                "%s:2: unknown section [optimizer] (sections: [run] [model] [tokenizer] [data] [train] [rl] "
                "[kernelgym] [ckpt] [dist])");
    EXPECT_FILE("lr = 1\n", DK_ERR_USAGE, "%s:1: key 'lr' is outside any [section]");
    EXPECT_FILE("[train]\nlr = abc\n", DK_ERR_USAGE, "%s:2: [train] lr = 'abc': expected a float");
    EXPECT_FILE("[train]\nlr = 1e-3 # peak\nlr = inf\n", DK_ERR_USAGE,
                "%s:3: [train] lr is set twice (first on line 2)");
    EXPECT_FILE("[train]\nlr = nan\n", DK_ERR_USAGE, "%s:2: [train] lr = 'nan': expected a float");
    EXPECT_FILE("[run]\nsteps = 1.5\n", DK_ERR_USAGE, "%s:2: [run] steps = '1.5': expected an integer");
    EXPECT_FILE("[run]\nsteps = 99999999999\n", DK_ERR_USAGE, "%s:2: [run] steps = '99999999999': expected an integer");
    EXPECT_FILE("[model]\ntie_embeddings = maybe\n", DK_ERR_USAGE,
                "%s:2: [model] tie_embeddings = 'maybe': expected a bool (true, false, 1, 0, yes, no)");
    EXPECT_FILE("[run]\ndevice = tpu\n", DK_ERR_USAGE, "%s:2: [run] device = 'tpu': expected one of cpu, cuda");
    EXPECT_FILE("[rl]\nloss_agg = mean\n", DK_ERR_USAGE,
                "%s:2: [rl] loss_agg = 'mean': expected one of token-mean, seq-mean-token-sum, seq-mean-token-mean");
    EXPECT_FILE("[train]\nlr = -1e-3\n", DK_ERR_USAGE, "%s:2: [train] lr = '-1e-3': must be > 0");
    EXPECT_FILE("[train]\nbeta2 = 1\n", DK_ERR_USAGE, "%s:2: [train] beta2 = '1': must be in [0, 1)");
    EXPECT_FILE("[rl]\ntop_p = 0\n", DK_ERR_USAGE, "%s:2: [rl] top_p = '0': must be in (0, 1]");
    EXPECT_FILE("[run]\nsteps = 0\n", DK_ERR_USAGE, "%s:2: [run] steps = '0': must be > 0");
    EXPECT_FILE("[run]\nmode = sft\nthis line is not ini\n", DK_ERR_USAGE,
                "%s:3: syntax error: expected '[section]', 'key = value' or a comment");
    EXPECT_FILE("[run]\n" MODEL, DK_OK, "");
    /* a value longer than a string holds, and a line longer than a line holds */
    char big[6000];
    int n = snprintf(big, sizeof big, "[run]\ndir = ");
    memset(big + n, 'a', 1100);
    snprintf(big + n + 1100, sizeof big - (size_t)n - 1100, "\n");
    EXPECT_FILE(big, DK_ERR_USAGE, "%s:2: [run] dir = 'aaaa*");
    memset(big + n, 'a', 5000);
    snprintf(big + n + 5000, sizeof big - (size_t)n - 5000, "\n");
    EXPECT_FILE(big, DK_ERR_USAGE, "%s:2: line longer than 4093 characters");

    /* missing file: exact message */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no_such.ini", tmp);
    expect(__LINE__, missing, 0, NULL, DK_ERR_USAGE, "%s: cannot open config file: No such file or directory");
}

static void test_cross_key(void) {
    EXPECT_FILE("[train]\nlr = 1e-3\nmin_lr = 1e-2\n" MODEL, DK_ERR_USAGE,
                "%s:3: [train] min_lr = 0.01 exceeds [train] lr = 0.001");
    EXPECT_FILE("[train]\nbatch_size = 10\ngrad_accum = 4\n" MODEL, DK_ERR_USAGE,
                "%s:3: [train] grad_accum = 4 does not divide [train] batch_size = 10");
    EXPECT_FILE("[rl]\ndual_clip = 0.5\n" MODEL, DK_ERR_USAGE,
                "%s:2: [rl] dual_clip = 0.5 must be > 1 (or 0 to turn it off)");
    EXPECT_FILE("[data]\nmax_length = 8192\n" MODEL, DK_ERR_USAGE,
                "%s:2: [data] max_length = 8192 exceeds [model] max_position = 4096");
    EXPECT_FILE("[run]\nmode = sft\n", DK_ERR_USAGE,
                "%s: [model] vocab_size is not set: give the model's shape, or set [model] path to a Hugging Face "
                "checkpoint");
    EXPECT_FILE(MODEL "n_kv_heads = 3\n", DK_ERR_USAGE, "%s: [model] n_heads = 4 is not a multiple of n_kv_heads = 3");
    EXPECT_FILE(MODEL "qk_norm = false\n", DK_ERR_USAGE,
                "%s:8: [model] qk_norm = false does not fit arch = qwen3 (Qwen3 always normalises q and k)");
    EXPECT_FILE(MODEL "arch = qwen2\no_bias = true\n", DK_ERR_USAGE,
                "%s:9: [model] o_bias = true does not fit arch = qwen2 (Qwen2 has no output-projection bias)");
    EXPECT_FILE("[model]\npath = tests/fixtures/config/qwen3_tiny\nhidden_size = 64\n", DK_ERR_USAGE,
                "%1$s:3: [model] hidden_size cannot be set together with [model] path (%1$s:2): the checkpoint's "
                "config.json defines the model");
    /* a shape key on the command line over a file's checkpoint */
    const char *with_path = ini("p.ini", "[model]\npath = tests/fixtures/config/qwen3_tiny\n");
    EXPECT_OV(with_path, DK_ERR_USAGE,
              "command line: [model] n_layers cannot be set together with [model] path (%s:2): the checkpoint's "
              "config.json defines the model",
              "model.n_layers=3");
}

static void test_overrides(void) {
    const char *path = ini("o.ini", "[run]\nsteps = 10\n[train]\nlr = 1e-3\n" MODEL);
    dk_config cfg;
    const char *const ov[] = {"train.lr=0.5", "run.steps = 7", "rl.prs=hard", "run.steps=8", "data.train=\"a b\""};
    dk_status s = config_load(&cfg, path, 5, (char **)ov);
    CHECK(s == DK_OK, "overrides: %s", dk_error());
    CHECK(cfg.train.lr == 0.5 && cfg.run.steps == 8 && cfg.rl.prs == PRS_HARD && !strcmp(cfg.data.train, "a b"),
          "overrides not applied: lr %g steps %d prs %d train '%s'", cfg.train.lr, cfg.run.steps, cfg.rl.prs,
          cfg.data.train);
    EXPECT_OV(path, DK_ERR_USAGE, "command line: override 'lr=1' is not section.key=value", "lr=1");
    EXPECT_OV(path, DK_ERR_USAGE, "command line: override 'train.lr' is not section.key=value", "train.lr");
    EXPECT_OV(path, DK_ERR_USAGE, "command line: override '.lr=1' is not section.key=value", ".lr=1");
    EXPECT_OV(path, DK_ERR_USAGE, "command line: unknown key 'lerning_rate' in [train] (did you mean 'lr'?)",
              "train.lerning_rate=1e-3");
    EXPECT_OV(path, DK_ERR_USAGE, "command line: unknown section [trian] in 'trian.lr=1' (did you mean [train]?)",
              "trian.lr=1");
    EXPECT_OV(path, DK_ERR_USAGE, "command line: [train] lr = 'fast': expected a float", "train.lr=fast");
    EXPECT_OV(path, DK_ERR_USAGE, "command line: [run] device = 'tpu': expected one of cpu, cuda", "run.device=tpu");
    EXPECT_OV(path, DK_ERR_USAGE, "command line: [train] min_lr = 0.1 exceeds [train] lr = 0.001", "train.min_lr=0.1");
    /* no file at all: defaults and overrides */
    const char *const only[] = {"model.path=tests/fixtures/config/qwen3_tiny"};
    s = config_load(&cfg, NULL, 1, (char **)only);
    CHECK(s == DK_OK && !strcmp(cfg.run.dir, "runs/default"), "no file: %s, dir %s", dk_error(), cfg.run.dir);
}

static void test_derived(void) {
    dk_config cfg;
    /* run.dir from the file name; implied shape written back; flags by arch */
    dk_status s = config_load(&cfg, ini("my.run.ini", MODEL "arch = qwen2\n"), 0, NULL);
    CHECK(s == DK_OK, "derived: %s", dk_error());
    CHECK(!strcmp(cfg.run.dir, "runs/my.run"), "run.dir %s", cfg.run.dir);
    CHECK(cfg.model.n_kv_heads == 4 && cfg.model.head_dim == 8, "implied kv heads %d, head_dim %d",
          cfg.model.n_kv_heads, cfg.model.head_dim);
    CHECK(cfg.model.qkv_bias && !cfg.model.o_bias && !cfg.model.qk_norm, "qwen2 flags %d %d %d", cfg.model.qkv_bias,
          cfg.model.o_bias, cfg.model.qk_norm);
    s = config_load(&cfg, ini("t.ini", MODEL "arch = llama\nqkv_bias = yes\n"), 0, NULL);
    CHECK(s == DK_OK && cfg.model.qkv_bias && cfg.model.o_bias && !cfg.model.qk_norm, "llama attention bias: %s",
          dk_error());
    s = config_load(&cfg, ini("t.ini", MODEL), 0, NULL);
    CHECK(s == DK_OK && !cfg.model.qkv_bias && !cfg.model.o_bias && cfg.model.qk_norm, "qwen3 flags");
    model_config mc;
    CHECK(config_model(&cfg, &mc) == DK_OK && mc.n_heads == 4 && mc.head_dim == 8 && mc.n_kv_heads == 4 &&
              mc.qk_norm && mc.bos_token_id == -1,
          "config_model from shape keys: %s", dk_error());

    /* a checkpoint: the tokenizer defaults to its tokenizer.json; the model is its config.json */
    const char *const ov[] = {"model.path=tests/fixtures/config/qwen3_tiny"};
    s = config_load(&cfg, "configs/tiny-sft.ini", 1, (char **)ov);
    CHECK(s == DK_OK, "model.path override on tiny.ini: %s", dk_error());
    CHECK(!strcmp(cfg.tokenizer.path, "tests/fixtures/tokenizers/bpe/tokenizer.json"), "tokenizer kept: %s",
          cfg.tokenizer.path);
    CHECK(cfg.model.hidden_size == 0 && cfg.model.n_layers == 0, "file's shape keys not dropped");
    s = config_model(&cfg, &mc);
    CHECK(s == DK_OK && mc.hidden_size == 64 && mc.n_layers == 2 && mc.tie_embeddings && mc.eos_token_id == 2,
          "config_model from path: %s", dk_error());
    s = config_load(&cfg, ini("t.ini", "[model]\npath = tests/fixtures/config/qwen3_tiny\n"), 0, NULL);
    CHECK(s == DK_OK && !strcmp(cfg.tokenizer.path, "tests/fixtures/config/qwen3_tiny/tokenizer.json"),
          "tokenizer from model.path: %s", cfg.tokenizer.path);
    const char *const bad[] = {"model.path=tests/fixtures/no_such_model"};
    s = config_load(&cfg, "configs/tiny-sft.ini", 1, (char **)bad);
    CHECK(s == DK_OK, "a missing checkpoint is found when the model is read: %s", dk_error());
    s = config_model(&cfg, &mc);
    CHECK(s == DK_ERR_USAGE && strstr(dk_error(), "tests/fixtures/no_such_model/config.json"), "missing model: %s",
          dk_error());
}

/* save -> load is the identity, and the saved text is a fixed point. */
static void round_trip(const char *label, const dk_config *cfg) {
    char saved[300], again[300];
    snprintf(saved, sizeof saved, "%s/saved.ini", tmp);
    snprintf(again, sizeof again, "%s/again.ini", tmp);
    dk_config back;
    dk_status s = config_save(cfg, saved);
    if (s == DK_OK) s = config_load(&back, saved, 0, NULL);
    CHECK(s == DK_OK, "%s: save/load: %s", label, dk_error());
    if (s) return;
    CHECK(config_equal(cfg, &back), "%s: loaded config differs from the saved one", label);
    config_save(&back, again);
    char *a = NULL, *b = NULL;
    dk_read_file(saved, &a, NULL);
    dk_read_file(again, &b, NULL);
    CHECK(a && b && !strcmp(a, b), "%s: saved text changes on a second round", label);
    free(a);
    free(b);
}

static void test_round_trip(void) {
    dk_config cfg;
    const char *odd = ini("odd.ini",
                          "[run]\ndir = \"  spaced dir  \"\nseed = 0\n[data]\ntrain = \"\"quoted\"\"\n"
                          "tasks = a;b#c\n[train]\nlr = 0.30000000000000004\nmin_lr = 1e-300\n"
                          "[rl]\nclip_high = 0.1\nprs = off\n" MODEL "rope_theta = 12345.678\n");
    dk_status s = config_load(&cfg, odd, 0, NULL);
    CHECK(s == DK_OK, "odd values: %s", dk_error());
    CHECK(!strcmp(cfg.run.dir, "  spaced dir  ") && !strcmp(cfg.data.train, "\"quoted\"") &&
              !strcmp(cfg.data.tasks, "a;b#c") && cfg.train.lr == 0.30000000000000004,
          "odd values read as dir '%s' train '%s' tasks '%s'", cfg.run.dir, cfg.data.train, cfg.data.tasks);
    if (s == DK_OK) round_trip("odd values", &cfg);
    const char *const ov[] = {"model.path=tests/fixtures/config/qwen3_tiny"};
    if (config_load(&cfg, "configs/tiny-sft.ini", 1, (char **)ov) == DK_OK) round_trip("with model.path", &cfg);
    /* a value that cannot be written as ini is refused, not saved wrong */
    const char *const semi[] = {"data.train=a ;b"};
    s = config_load(&cfg, "configs/tiny-sft.ini", 1, (char **)semi);
    char saved[300];
    snprintf(saved, sizeof saved, "%s/semi.ini", tmp);
    s = s ? s : config_save(&cfg, saved);
    CHECK(s == DK_ERR_USAGE && strstr(dk_error(), "[data] train"), "unsavable value: %s", dk_error());
}

/* The commented block of a recipe config that holds the public 14B script's
 * values ("#   key = value" lines): exactly the keys whose `script` value the
 * key table records, with those values; applied as overrides they give the
 * script's clip 0.2 / 0.28, dual clip 3 and soft PRS. */
/* Equal as text, or as numbers when both are numbers ("3" and "3.0"). */
static bool same_value(const char *a, const char *b) {
    char *ea, *eb;
    double x = strtod(a, &ea), y = strtod(b, &eb);
    return !strcmp(a, b) || (ea != a && !*ea && eb != b && !*eb && x == y);
}

static void public_script_block(const char *path) {
    char *text = NULL;
    CHECK(dk_read_file(path, &text, NULL) == DK_OK, "%s: %s", path, dk_error());
    if (!text) return;
    char ov_buf[8][160];
    char *ov[8];
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char key[64], value[64];
        if (strncmp(line, "#   ", 4) || sscanf(line + 4, "%63s = %63s", key, value) != 2) continue;
        int found = 0;
        for (int i = 0; i < config_n_keys; i++)
            if (!strcmp(config_keys[i].section, "rl") && !strcmp(config_keys[i].key, key) && config_keys[i].script)
                found = same_value(config_keys[i].script, value);
        CHECK(found, "%s: '%s' is not a public-script value of the key table", path, line);
        if (n < 8) {
            snprintf(ov_buf[n], sizeof ov_buf[n], "rl.%s=%s", key, value);
            ov[n] = ov_buf[n];
            n++;
        }
    }
    free(text);
    int n_script = 0;
    for (int i = 0; i < config_n_keys; i++) n_script += config_keys[i].script != NULL;
    CHECK(n == n_script && n == 3, "%s: %d public-script lines, the key table has %d", path, n, n_script);
    dk_config cfg;
    dk_status s = config_load(&cfg, path, n, ov);
    CHECK(s == DK_OK && cfg.rl.clip_low == 0.2 && cfg.rl.clip_high == 0.28 && cfg.rl.dual_clip == 3.0 &&
              cfg.rl.prs == PRS_SOFT && cfg.rl.prs_threshold == 0.3,
          "%s with the public script's values: %s (clip %g/%g dual %g prs %d)", path, s ? dk_error() : "wrong values",
          cfg.rl.clip_low, cfg.rl.clip_high, cfg.rl.dual_clip, (int)cfg.rl.prs);
}

/* The defaults: the product brief's clip (0.2 both sides, no dual clip), the
 * write-up's hard PRS at 0.3; rl/'s own defaults say the same. */
static void test_defaults(void) {
    dk_config cfg;
    config_defaults(&cfg);
    CHECK(cfg.rl.clip_low == 0.2 && cfg.rl.clip_high == 0.2 && cfg.rl.dual_clip == 0 && cfg.rl.prs == PRS_HARD &&
              cfg.rl.prs_threshold == 0.3 && cfg.rl.advantage == ADV_TRLOO && cfg.rl.gamma == 1.0,
          "defaults: clip %g/%g dual %g prs %d threshold %g", cfg.rl.clip_low, cfg.rl.clip_high, cfg.rl.dual_clip,
          (int)cfg.rl.prs, cfg.rl.prs_threshold);
    ppo_config pc;
    ppo_config_default(&pc);
    prs_config rc;
    prs_config_default(&rc);
    adv_config ac;
    adv_config_default(&ac);
    CHECK(pc.clip_low == cfg.rl.clip_low && pc.clip_high == cfg.rl.clip_high && pc.dual_clip == cfg.rl.dual_clip &&
              pc.agg == cfg.rl.loss_agg && pc.kl_coef == cfg.rl.kl_coef && pc.entropy_coef == cfg.rl.entropy_coef,
          "ppo_config_default differs from the config's defaults");
    CHECK(rc.mode == cfg.rl.prs && rc.threshold == cfg.rl.prs_threshold, "prs_config_default differs");
    CHECK(ac.estimator == cfg.rl.advantage && ac.gamma == cfg.rl.gamma, "adv_config_default differs");
}

/* Every enum key's name table is complete (no hole a designated initializer
 * would leave), without repeats, and its default is one of its names;
 * run.device's names are those of kernels/ (ops_device_name). */
static void test_enum_names(void) {
    int n_enum = 0;
    for (int i = 0; i < config_n_keys; i++) {
        const config_key *k = &config_keys[i];
        if (k->type != CK_ENUM) continue;
        n_enum++;
        int has_def = 0;
        for (int a = 0; a < k->n_names; a++) {
            CHECK(k->names[a] && k->names[a][0], "[%s] %s: value %d has no name", k->section, k->key, a);
            if (!k->names[a]) continue;
            has_def |= !strcmp(k->names[a], k->def);
            for (int b = 0; b < a; b++)
                CHECK(k->names[b] && strcmp(k->names[a], k->names[b]), "[%s] %s: '%s' twice", k->section, k->key,
                      k->names[a]);
        }
        CHECK(k->n_names >= 2 && has_def, "[%s] %s: %d names, default '%s'", k->section, k->key, k->n_names, k->def);
    }
    CHECK(n_enum == 11, "%d enum keys", n_enum);
    for (int d = DK_DEVICE_CPU; d <= DK_DEVICE_CUDA; d++) {
        dk_device back;
        CHECK(!strcmp(config_device_names[d], ops_device_name((dk_device)d)) &&
                  ops_parse_device(config_device_names[d], &back) == DK_OK && back == (dk_device)d,
              "run.device value %d: '%s' vs ops_device_name '%s'", d, config_device_names[d],
              ops_device_name((dk_device)d));
    }
    for (int r = 0; r < MODEL_N_RECOMPUTE; r++)
        CHECK(!strcmp(config_recompute_names[r], model_recompute_names[r]), "train.recompute value %d: '%s' vs '%s'",
              r, config_recompute_names[r], model_recompute_names[r]);
    CHECK(!strcmp(config_recompute_names[MODEL_N_RECOMPUTE], "auto"), "train.recompute's last value is auto");
    /* the config reads rl/'s, model/'s and env/'s names: an override lands on their enums */
    const char *const ov[] = {"rl.advantage=rloo", "rl.loss_agg=token-mean", "rl.prs=soft",
                              "train.recompute=layer_keep_attention", "model.arch=llama", "kernelgym.device=cpu"};
    dk_config cfg;
    dk_status s = config_load(&cfg, ini("e.ini", MODEL), 6, (char **)ov);
    CHECK(s == DK_OK && cfg.rl.advantage == ADV_RLOO && cfg.rl.loss_agg == PPO_AGG_TOKEN_MEAN &&
              cfg.rl.prs == PRS_SOFT && cfg.train.recompute == MODEL_RECOMPUTE_LAYER_KEEP_ATTENTION &&
              cfg.model.arch == DK_ARCH_LLAMA && cfg.kernelgym.device == KG_DEVICE_CPU,
          "enum overrides: %s", s ? dk_error() : "wrong values");
}

static void test_shipped(void) {
    DIR *d = opendir("configs");
    CHECK(d != NULL, "no configs/ folder (run from the repository root)");
    if (!d) return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".ini")) continue;
        char path[512];
        snprintf(path, sizeof path, "configs/%s", e->d_name);
        dk_config cfg;
        model_config mc;
        dk_status s = config_load(&cfg, path, 0, NULL);
        CHECK(s == DK_OK, "%s: %s", path, dk_error());
        /* A config that starts from another run's checkpoint (tiny.ini after
         * tiny-sft.ini) has no model to read until that run has happened. */
        char cj[DK_CONFIG_STR + 16];
        snprintf(cj, sizeof cj, "%s/config.json", cfg.model.path);
        if (s == DK_OK && cfg.model.path[0] && access(cj, R_OK) != 0) {
            printf("  %-26s loads; its model %s is made by another run\n", path, cfg.model.path);
            round_trip(path, &cfg);
            n++;
            continue;
        }
        if (s == DK_OK) s = config_model(&cfg, &mc);
        CHECK(s == DK_OK, "%s: %s", path, dk_error());
        if (s == DK_OK) {
            round_trip(path, &cfg);
            printf("  %-26s mode %d, %d layers x %d wide, %.3g params\n", path, cfg.run.mode, mc.n_layers,
                   mc.hidden_size, (double)model_config_n_params(&mc));
        }
        n++;
    }
    closedir(d);
    CHECK(n >= 3, "only %d configs/*.ini found", n);

    /* the recipe configs describe the published checkpoints exactly */
    static const char *const pairs[][2] = {{"configs/drkernel14b.ini", "tests/fixtures/config/qwen3_14b_hub"},
                                           {"configs/drkernel8b.ini", "tests/fixtures/config/qwen3_8b_hub"}};
    for (int i = 0; i < 2; i++) {
        dk_config cfg;
        model_config ours, hub;
        dk_status s = config_load(&cfg, pairs[i][0], 0, NULL);
        if (s == DK_OK) s = config_model(&cfg, &ours);
        if (s == DK_OK) s = model_config_from_hf(pairs[i][1], &hub);
        CHECK(s == DK_OK && !memcmp(&ours, &hub, sizeof ours), "%s differs from %s/config.json: %s", pairs[i][0],
              pairs[i][1], s ? dk_error() : "fields differ");
        if (s == DK_OK)
            CHECK(cfg.run.mode == DK_MODE_RL && cfg.run.device == DK_DEVICE_CUDA && cfg.train.lr == 1e-6 &&
                      cfg.train.schedule == LR_COSINE && cfg.train.batch_size == 256 && cfg.train.grad_accum == 1 &&
                      cfg.train.micro_batch_tokens == 32768 &&
                      cfg.data.max_length == 32768 && cfg.rl.gamma == 1.0 && cfg.rl.clip_low == 0.2 &&
                      cfg.rl.clip_high == 0.2 && cfg.rl.dual_clip == 0 && cfg.rl.max_turns == 3 &&
                      cfg.rl.n_samples == 16 && cfg.rl.temperature == 1.0 && cfg.rl.max_new_tokens == 8192 &&
                      cfg.rl.loss_agg == PPO_AGG_SEQ_MEAN_TOKEN_SUM && cfg.rl.prs == PRS_HARD &&
                      cfg.rl.prs_threshold == 0.3 && cfg.train.grad_clip == 1.0,
                  "%s: recipe hyperparameters", pairs[i][0]);
        public_script_block(pairs[i][0]);
    }
    dk_config tiny;
    CHECK(config_load(&tiny, "configs/tiny-sft.ini", 0, NULL) == DK_OK && tiny.run.mode == DK_MODE_SFT &&
              tiny.run.device == DK_DEVICE_CPU && !strcmp(tiny.run.dir, "runs/tiny-sft") && tiny.model.vocab_size == 512,
          "tiny.ini: %s", dk_error());
}

int main(void) {
    if (!mkdtemp(tmp)) return 1;
    test_file_errors();
    test_cross_key();
    test_overrides();
    test_derived();
    test_round_trip();
    test_defaults();
    test_enum_names();
    test_shipped();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmp);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
