/* test_prompts.c: template rendering (rl/prompts.c): substitution, escapes,
 * values inserted verbatim (source code full of braces), unknown template keys
 * named with their line, templates loaded from a file; and the default
 * first-turn and follow-up prompts carry what they must (the reference source
 * inside one python block, ModelNew, the feedback, the turn numbers). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "rl/extract.h"
#include "rl/prompts.h"
#include "tests/check.h"

static void expect_render(const char *tmpl, const char *want) {
    const char *keys[] = {"a", "long_key2"}, *vals[] = {"X", "{a} {{b}}"};
    char *out = NULL;
    dk_status s = prompt_render(tmpl, keys, vals, 2, &out);
    CHECK(s == DK_OK && strcmp(out, want) == 0, "render '%s': got '%s' (%s), want '%s'", tmpl, out ? out : "",
          s ? dk_error() : "ok", want);
    free(out);
}

static const char source[] =
    "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
    "        return {\"y\": x}[\"y\"] * 2  # {name} stays as written\n\n"
    "def get_inputs():\n    return [torch.rand(4)]\n\ndef get_init_inputs():\n    return []";

int main(void) {
    expect_render("plain text", "plain text");
    expect_render("{a}-{a}", "X-X");
    expect_render("v={long_key2}.", "v={a} {{b}}."); /* values are never rescanned */
    expect_render("{{a}} and }}", "{a} and }");
    expect_render("d = {} ; {1} ; { a } ; {a", "d = {} ; {1} ; { a } ; {a");

    const char *keys[] = {"a"}, *vals[] = {"X"};
    char *out = NULL;
    CHECK(prompt_render("ok\nstill ok\nthen {typo} here", keys, vals, 1, &out) == DK_ERR_USAGE &&
              strstr(dk_error(), "line 3") && strstr(dk_error(), "{typo}") && strstr(dk_error(), "{a}"),
          "unknown key: %s", dk_error());

    /* The default first prompt: the source verbatim inside its only python block. */
    CHECK(prompt_first(NULL, "19", "19_Conv_Relu", 2, source, NULL, &out) == DK_OK, "%s", dk_error());
    char *code = NULL;
    CHECK(extract_code_block(out, strlen(out), &code) == EXTRACT_PYTHON, "no python block in the first prompt");
    CHECK(code && strncmp(code, source, strlen(source)) == 0 && strlen(code) == strlen(source) + 1,
          "the block is not the source:\n%s", code ? code : "");
    CHECK(strstr(out, "ModelNew") && strstr(out, "Triton") && strstr(out, "19_Conv_Relu") && strstr(out, "```python"),
          "first prompt lacks ModelNew / Triton / the name / the answer format:\n%s", out);
    printf("prompts: default first-turn prompt %zu bytes around a %zu-byte source\n", strlen(out) - strlen(source),
           strlen(source));
    free(code);
    /* A known bottleneck is a paragraph of its own before the request; an
     * empty one leaves the prompt byte for byte as without it. */
    char *with = NULL, *empty = NULL;
    CHECK(prompt_first(NULL, "19", "19_Conv_Relu", 2, source, "Reference time by op: conv 90%.\n", &with) == DK_OK &&
              prompt_first(NULL, "19", "19_Conv_Relu", 2, source, "", &empty) == DK_OK,
          "%s", dk_error());
    CHECK(with && strstr(with, "```\n\nReference time by op: conv 90%.\n\nWrite `ModelNew`"), "bottleneck:\n%s", with);
    CHECK(empty && strcmp(empty, out) == 0 && strlen(with) == strlen(out) + strlen("Reference time by op: conv 90%.\n\n"),
          "an empty bottleneck changed the prompt");
    free(with);
    free(empty);
    free(out);

    CHECK(prompt_followup(NULL, "status: incorrect\nmax_abs_diff: 0.5", 2, 3, &out) == DK_OK, "%s", dk_error());
    CHECK(strstr(out, "status: incorrect\nmax_abs_diff: 0.5") && strstr(out, "turn 2 of 3") && strstr(out, "ModelNew"),
          "follow-up prompt:\n%s", out);
    free(out);

    /* User templates from files. */
    char dir[] = "/tmp/dk_prompts_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char good[512], bad[512];
    snprintf(good, sizeof good, "%s/first.txt", dir);
    snprintf(bad, sizeof bad, "%s/followup.txt", dir);
    const char g[] = "Task {id} (level {level}): {name}\n{source}\n";
    const char b[] = "Feedback:\n{feedback}\nturn {turn}, {source}\n";
    dk_write_file(good, g, strlen(g));
    dk_write_file(bad, b, strlen(b));
    char *tmpl = NULL;
    CHECK(prompt_load(good, PROMPT_FIRST, &tmpl) == DK_OK, "%s", dk_error());
    CHECK(prompt_first(tmpl, "7", "7_Gemm", 2, "SRC", "", &out) == DK_OK && strcmp(out, "Task 7 (level 2): 7_Gemm\nSRC") == 0,
          "file template: '%s'", out);
    free(out);
    free(tmpl);
    CHECK(prompt_load(bad, PROMPT_FOLLOWUP, &tmpl) == DK_ERR_USAGE && strstr(dk_error(), bad) &&
              strstr(dk_error(), "line 3") && strstr(dk_error(), "{source}"),
          "follow-up template using {source}: %s", dk_error());
    unlink(good);
    unlink(bad);
    rmdir(dir);
    CHECK(prompt_load("/nonexistent/t.txt", PROMPT_FIRST, &tmpl) != DK_OK && strstr(dk_error(), "/nonexistent/t.txt"),
          "missing file: %s", dk_error());
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
