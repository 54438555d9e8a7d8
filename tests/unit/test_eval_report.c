/* Fast@p arithmetic of the eval report on a hand-made set of 5 tasks x 2
 * turns: the denominator is every task; a hack, an incorrect or an untimed
 * answer is never fast; "best" takes each task's fastest correct turn. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer/eval_report.h"
#include "tests/check.h"

static void set(rl_rollout *r, int t, rl_outcome o, double speedup) {
    r->res[t].outcome = o;
    r->res[t].correct = o == RL_OUT_OK;
    r->res[t].speedup = speedup;
    r->res[t].coverage = NAN;
    if (t + 1 > r->n_turns) r->n_turns = t + 1;
}

int main(void) {
    rl_rollout ro[5];
    memset(ro, 0, sizeof ro);
    set(&ro[0], 0, RL_OUT_OK, 1.1);           /* fast@1 at turn 1 */
    set(&ro[0], 1, RL_OUT_OK, 2.5);           /* fast@2 at turn 2 */
    set(&ro[1], 0, RL_OUT_INCORRECT, NAN);
    set(&ro[1], 1, RL_OUT_OK, 1.3);
    set(&ro[2], 0, RL_OUT_HACK, 50.0);        /* a hack is never fast */
    set(&ro[2], 1, RL_OUT_COMPILE_ERROR, NAN);
    set(&ro[3], 0, RL_OUT_OK, 0.8);           /* correct but slower */
    set(&ro[4], 0, RL_OUT_OK, NAN);           /* correct, untimed (CPU) */
    eval_summary s;
    eval_summarise(&s, ro, 5, 2);
    /* turn 1: fast > 1.0: task 0 only; correct: 0, 3, 4 */
    CHECK(fabs(s.fast[0][0] - 0.2) < 1e-12, "turn1 fast@1 %g", s.fast[0][0]);
    CHECK(fabs(s.correct_rate[0] - 0.6) < 1e-12, "turn1 correct %g", s.correct_rate[0]);
    CHECK(fabs(s.hack_rate[0] - 0.2) < 1e-12, "turn1 hack %g", s.hack_rate[0]);
    /* turn 2: tasks 0 (2.5) and 1 (1.3) */
    CHECK(fabs(s.fast[1][0] - 0.4) < 1e-12 && fabs(s.fast[1][1] - 0.4) < 1e-12 && fabs(s.fast[1][2] - 0.2) < 1e-12 &&
              fabs(s.fast[1][3] - 0.2) < 1e-12,
          "turn2 fast %g %g %g %g", s.fast[1][0], s.fast[1][1], s.fast[1][2], s.fast[1][3]);
    /* best: task0 2.5, task1 1.3, task3 0.8, task4 untimed -> fast@1 = 2/5 */
    CHECK(fabs(s.fast[2][0] - 0.4) < 1e-12, "best fast@1 %g", s.fast[2][0]);
    CHECK(fabs(s.fast[2][3] - 0.2) < 1e-12, "best fast@2 %g", s.fast[2][3]);
    CHECK(fabs(s.correct_rate[2] - 0.8) < 1e-12, "best correct %g", s.correct_rate[2]);
    CHECK(s.n_speedups == 3, "timed %d", s.n_speedups);
    double gm = exp((log(2.5) + log(1.3) + log(0.8)) / 3);
    CHECK(fabs(s.speedup_geomean - gm) < 1e-12, "geomean %g vs %g", s.speedup_geomean, gm);
    CHECK(fabs(s.speedup_mean - (2.5 + 1.3 + 0.8) / 3) < 1e-12, "mean %g", s.speedup_mean);
    printf("eval report: fast@1 best %.2f, geomean %.4f (hand: %.4f)\n", s.fast[2][0], s.speedup_geomean, gm);
    printf("%d passed, %d failed\n", 11 - failures, failures);
    return failures != 0;
}
