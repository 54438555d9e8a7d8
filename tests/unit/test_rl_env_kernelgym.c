/* The RL side of KernelGym on the CPU: a private fleet (redis-server + one
 * worker through the Triton interpreter) scores a batch of responses with
 * every outcome the rollout must survive, and an unreachable Redis scores a
 * batch 0 without failing, only after [kernelgym] reconnect_s, and counts the
 * turns in env->judge_lost:
 *   honest Triton candidate      -> ok, correct, reward (1 - alpha) * coverage
 *   no python block              -> no_code, reward 0, never sent
 *   a task that does not load    -> error, reward 0
 *   a candidate that never ends  -> timeout, reward 0 (timeout_s = 4)
 *   the same past a batch deadline of 1 s -> error (no verdict), reward 0
 * Exits 77 when redis-server is not installed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "env/fleet.h"
#include "rl/env_kernelgym.h"
#include "tests/check.h"

static char *read_or_die(const char *path) {
    char *s;
    if (dk_read_file(path, &s, NULL) != DK_OK) {
        printf("%s\n", dk_error());
        exit(1);
    }
    return s;
}

static char *fenced(const char *code) {
    size_t n = strlen(code) + 64;
    char *s = dk_malloc(n);
    snprintf(s, n, "Here it is:\n```python\n%s```\n", code);
    return s;
}

int main(void) {
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        printf("redis-server not installed: skipped\n");
        return 77;
    }
    char *softmax = read_or_die("tests/kernelgym/tasks/softmax.py");
    char *good = read_or_die("tests/kernelgym/candidates/softmax__triton.py");
    /* Launches a real Triton kernel (so no static check objects), then spins. */
    char *loop = dk_strdup(
        "import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    m = offs < n\n"
        "    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)\n\n"
        "class ModelNew(torch.nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n"
        "        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)\n"
        "        k = 0\n        for i in range(10**12):\n            k += i\n        return y\n");
    /* Passes the task-set check (Model, get_inputs, get_init_inputs) but cannot import. */
    const char *broken =
        "import torch\nimport module_that_does_not_exist\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x\n\ndef get_inputs():\n    return [torch.rand(4)]\n\n"
        "def get_init_inputs():\n    return []\n";
    rl_task tasks[4] = {{"1", "softmax", 0, softmax, NULL}, {"2", "softmax", 0, softmax, NULL},
                        {"3", "broken", 0, broken, NULL}, {"4", "softmax", 0, softmax, NULL}};
    char *r_good = fenced(good), *r_loop = fenced(loop);
    const char *responses[4] = {r_good, "I would use a Triton kernel here.", r_good, r_loop};

    kg_fleet fleet;
    kg_fleet_config fc;
    kg_fleet_config_default(&fc);
    snprintf(fc.redis, sizeof fc.redis, "auto");
    snprintf(fc.device, sizeof fc.device, "cpu");
    fc.n_cpu_workers = 1;
    if (kg_fleet_start(&fleet, &fc) != DK_OK) {
        printf("fleet: %s\n", dk_error());
        return 1;
    }
    rl_kg_config kc;
    kc.timeout_s = 4;
    kc.wait_s = 240;
    kc.reconnect_s = 30;
    kc.device = "cpu";
    kc.feedback_max_tokens = 0;
    kg_reward_config_default(&kc.reward, KG_REWARD_PROFILE);
    rl_env *env = rl_env_kernelgym_new(fleet.url, &kc);
    rl_turn_result res[4];
    memset(res, 0, sizeof res);
    double t0 = dk_now();
    env->score(env, tasks, responses, 4, res);
    printf("scored 4 responses in %.1f s\n", dk_now() - t0);
    for (int i = 0; i < 4; i++)
        printf("  %-14s %-8s reward %.3f\n", tasks[i].name, rl_outcome_name(res[i].outcome), res[i].reward);
    CHECK(res[0].outcome == RL_OUT_OK && res[0].correct, "honest candidate: %s", rl_outcome_name(res[0].outcome));
    CHECK(fabs(res[0].reward - 0.3) < 1e-9, "honest candidate on CPU: reward %g, want 0.3", res[0].reward);
    CHECK(res[1].outcome == RL_OUT_NO_CODE && res[1].reward == 0.0, "no code: %s", rl_outcome_name(res[1].outcome));
    CHECK(res[1].feedback && strstr(res[1].feedback, "no ```python code block"), "no-code feedback");
    CHECK(res[2].outcome == RL_OUT_ERROR && res[2].reward == 0.0, "broken task: %s", rl_outcome_name(res[2].outcome));
    CHECK(res[3].outcome == RL_OUT_TIMEOUT && res[3].reward == 0.0, "endless candidate: %s",
          rl_outcome_name(res[3].outcome));
    for (int i = 0; i < 4; i++) CHECK(res[i].feedback && res[i].feedback[0], "feedback %d is empty", i);
    CHECK(env->judge_lost == 0, "judge_lost %ld with a live fleet", env->judge_lost);
    for (int i = 0; i < 4; i++) rl_turn_result_clear(&res[i]);
    env->free(env);

    /* A batch deadline (wait_s 1) shorter than the candidate's own limit
     * (4 s): the verdict is missing, which is an error of the judging, not
     * the answer's timeout. */
    kc.wait_s = 1;
    env = rl_env_kernelgym_new(fleet.url, &kc);
    env->score(env, tasks + 3, responses + 3, 1, res);
    printf("  past the batch deadline: %s, reward %.3f\n", rl_outcome_name(res[0].outcome), res[0].reward);
    CHECK(res[0].outcome == RL_OUT_ERROR && res[0].reward == 0.0, "verdict missing at the deadline: %s",
          rl_outcome_name(res[0].outcome));
    CHECK(res[0].feedback && strstr(res[0].feedback, "did not finish"), "deadline feedback: %s",
          res[0].feedback ? res[0].feedback : "(null)");
    rl_turn_result_clear(&res[0]);
    env->free(env);
    kc.wait_s = 240;
    kg_fleet_stop(&fleet, 10.0);

    /* Nothing listens on port 1: after reconnect_s of retries the batch is
     * scored 0, nothing fails, and the 3 answers with code count as lost. */
    kc.reconnect_s = 1.5;
    env = rl_env_kernelgym_new("redis://127.0.0.1:1", &kc);
    t0 = dk_now();
    env->score(env, tasks, responses, 4, res);
    double waited = dk_now() - t0;
    CHECK(waited >= 1.5 && waited < 10, "unreachable redis: gave up after %.2f s, want reconnect_s = 1.5", waited);
    CHECK(env->judge_lost == 3, "judge_lost %ld, want 3", env->judge_lost);
    CHECK(res[0].outcome == RL_OUT_ERROR && res[0].reward == 0.0, "unreachable redis: %s",
          rl_outcome_name(res[0].outcome));
    CHECK(res[0].feedback && strstr(res[0].feedback, "could not run"), "unreachable feedback: %s",
          res[0].feedback ? res[0].feedback : "(null)");
    CHECK(res[1].outcome == RL_OUT_NO_CODE, "no code stays no_code without redis");
    for (int i = 0; i < 4; i++) rl_turn_result_clear(&res[i]);
    env->free(env);
    free(softmax);
    free(good);
    free(loop);
    free(r_good);
    free(r_loop);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures != 0;
}
