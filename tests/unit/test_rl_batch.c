/* Loss masks of the RL batch: only tokens the model sampled, in turns that
 * train (reached and not dropped by PRS), count; prompt, feedback and the
 * chat markers the loop appended never do, and each counted token carries
 * its own turn's advantage and the rollout engine's logprob. Hand-built
 * conversation: prompt(3) turn1(3 sampled) feedback(2) turn2(2 sampled).
 *
 * The step's cells (rl_batch_cells): a turn the judge gave no verdict on
 * (outcome error) is not valid, so with TRLOO it neither takes an advantage
 * nor lowers its group's baseline: four correct first answers, one of them
 * unjudged, all get advantage 0 (scored as a wrong answer, the unjudged one
 * took -1 and the others +1/3). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rl/advantage.h"
#include "trainer/rl_batch.h"
#include "tests/check.h"

static void check_cells(void) {
    enum { S = 4, TURNS = 2 };
    rl_rollout r[S];
    memset(r, 0, sizeof r);
    for (int i = 0; i < S; i++) {
        r[i].sample = i;
        r[i].n_turns = i == 3 ? 2 : 1; /* only sample 3 reached a second turn */
        for (int t = 0; t < r[i].n_turns; t++)
            r[i].res[t] = (rl_turn_result){.outcome = RL_OUT_OK, .correct = 1, .reward = 1.0, .coverage = 0.5};
    }
    r[3].res[1] = (rl_turn_result){.outcome = RL_OUT_INCORRECT, .reward = 0.0, .coverage = 0.25};
    r[0].res[0] = (rl_turn_result){.outcome = RL_OUT_ERROR, .reward = 0.0};
    float rewards[S * TURNS], coverage[S * TURNS], adv[S * TURNS];
    uint8_t valid[S * TURNS], correct[S * TURNS];
    memset(coverage, 0x7f, sizeof coverage); /* stale values from a step before */
    rl_batch_cells(r, S, TURNS, rewards, valid, correct, coverage);
    const uint8_t want_valid[S * TURNS] = {0, 0, 1, 0, 1, 0, 1, 1};
    for (int c = 0; c < S * TURNS; c++) {
        CHECK(valid[c] == want_valid[c], "cell %d: valid %d want %d", c, valid[c], want_valid[c]);
        const int judged_ok = c == 2 || c == 4 || c == 6; /* first turns of samples 1..3 */
        const float cov = judged_ok ? 0.5f : c == 7 ? 0.25f : 0.0f;
        CHECK(coverage[c] == cov, "cell %d: coverage %g want %g", c, coverage[c], cov);
        CHECK(rewards[c] == (judged_ok ? 1.0f : 0.0f), "cell %d: reward %g", c, rewards[c]);
    }
    adv_config ac;
    adv_config_default(&ac);
    CHECK(adv_compute(&ac, 1, S, TURNS, rewards, valid, NULL, adv) == DK_OK, "advantages");
    double worst = 0.0;
    for (int c = 0; c < S * TURNS; c += TURNS) worst = fmax(worst, fabs(adv[c]));
    printf("cells: an unjudged turn is left out; first-turn advantages %g %g %g %g\n", adv[0], adv[2], adv[4],
           adv[6]);
    CHECK(worst == 0.0, "four correct answers, one unjudged: advantages must all be 0, worst |A| %g", worst);
}

int main(void) {
    check_cells();
    int32_t tokens[10] = {1, 2, 3, 10, 11, 12, 4, 5, 20, 21};
    uint8_t sampled[10] = {0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
    float logprobs[10] = {0, 0, 0, -0.1f, -0.2f, -0.3f, 0, 0, -0.4f, -0.5f};
    gen_seq s;
    memset(&s, 0, sizeof s);
    s.tokens = tokens;
    s.sampled = sampled;
    s.logprobs = logprobs;
    s.n_tokens = 10;
    rl_rollout r[2];
    memset(r, 0, sizeof r);
    for (int i = 0; i < 2; i++) {
        r[i].seq = &s;
        r[i].n_turns = 2;
        r[i].turn_start[0] = 3;
        r[i].turn_end[0] = 6;
        r[i].turn_start[1] = 8;
        r[i].turn_end[1] = 10;
        r[i].sample = i;
    }
    const int turns = 2;
    float adv[4] = {0.5f, -1.5f, 2.0f, 3.0f};
    uint8_t valid[4] = {1, 1, 1, 0}; /* rollout 1's turn 2 was dropped */
    rl_batch b;
    rl_batch_build(&b, r, 2, turns, adv, valid);
    CHECK(b.T == 20 && b.n_seqs == 2 && b.seq_start[1] == 10, "T %ld", b.T);
    /* Rollout 0: positions 2,3,4 predict the turn-1 tokens, 7,8 the turn-2 ones. */
    const int want0[10] = {0, 0, 1, 1, 1, 0, 0, 1, 1, 0};
    for (int t = 0; t < 10; t++) {
        CHECK(b.mask[t] == want0[t], "rollout 0 position %d: mask %d want %d", t, b.mask[t], want0[t]);
        if (want0[t]) {
            CHECK(b.targets[t] == tokens[t + 1], "position %d target %d", t, b.targets[t]);
            float a = t < 5 ? 0.5f : -1.5f;
            CHECK(b.adv[t] == a, "position %d advantage %g want %g", t, b.adv[t], a);
            CHECK(b.logp_rollout[t] == logprobs[t + 1], "position %d rollout logprob", t);
        } else {
            CHECK(b.targets[t] == -1 && b.adv[t] == 0.0f, "position %d must not count", t);
        }
    }
    /* Rollout 1: turn 2 dropped, so only turn 1 counts. */
    const int want1[10] = {0, 0, 1, 1, 1, 0, 0, 0, 0, 0};
    for (int t = 0; t < 10; t++)
        CHECK(b.mask[10 + t] == want1[t], "rollout 1 position %d: mask %d want %d", t, b.mask[10 + t], want1[t]);
    int n = 0;
    for (long t = 0; t < b.T; t++) n += b.mask[t];
    printf("rl batch: %d of %ld positions count (prompt, feedback and dropped turns excluded)\n", n, b.T);
    rl_batch_free(&b);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures != 0;
}
