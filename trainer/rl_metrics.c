/* rl_metrics.c: reduces a step's rollouts to the numbers a user watches. */
#include "trainer/rl_metrics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void rl_metrics_summarise(rl_step_summary *s, const rl_rollout *ro, int n, int max_turns, const float *rewards,
                          const prs_stats *ps) {
    memset(s, 0, sizeof *s);
    s->max_turns = max_turns;
    int counts[RL_OUT_COUNT] = {0};
    double sum_all = 0, cov = 0, spd = 0;
    int n_cov = 0, n_spd = 0, n_fast = 0;
    long len = 0;
    for (int t = 0; t < max_turns; t++) {
        double sum = 0, sq = 0;
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (t >= ro[i].n_turns) continue;
            double r = rewards[(size_t)i * max_turns + t];
            sum += r;
            sq += r * r;
            k++;
        }
        s->n_turn[t] = k;
        s->reward_mean[t] = k ? sum / k : NAN;
        s->reward_std[t] = k > 1 ? sqrt(fmax(0.0, (sq - sum * sum / k) / (k - 1))) : 0.0;
        sum_all += sum;
    }
    for (int i = 0; i < n; i++) {
        int fast = 0;
        for (int t = 0; t < ro[i].n_turns; t++) {
            const rl_turn_result *r = &ro[i].res[t];
            counts[r->outcome]++;
            s->n_evaluated++;
            len += ro[i].turn_end[t] - ro[i].turn_start[t];
            if (r->correct && isfinite(r->coverage)) {
                cov += r->coverage;
                n_cov++;
            }
            if (r->correct && isfinite(r->speedup)) {
                spd += r->speedup;
                n_spd++;
                if (r->speedup > 1.0) fast = 1;
            }
        }
        n_fast += fast;
    }
    const double ne = s->n_evaluated ? s->n_evaluated : 1;
    s->reward_mean_all = s->n_evaluated ? sum_all / s->n_evaluated : NAN;
    s->fast1 = n ? (double)n_fast / n : 0;
    s->correct_rate = counts[RL_OUT_OK] / ne;
    s->hack_rate = counts[RL_OUT_HACK] / ne;
    s->compile_error_rate = counts[RL_OUT_COMPILE_ERROR] / ne;
    s->no_code_rate = counts[RL_OUT_NO_CODE] / ne;
    s->timeout_rate = counts[RL_OUT_TIMEOUT] / ne;
    s->error_rate = (counts[RL_OUT_ERROR] + counts[RL_OUT_CRASH]) / ne;
    s->coverage_mean = n_cov ? cov / n_cov : NAN;
    s->speedup_mean = n_spd ? spd / n_spd : NAN;
    s->prs_drop_rate = ps && ps->n_correct ? (double)ps->n_dropped / ps->n_correct : 0;
    s->response_len_mean = s->n_evaluated ? (double)len / s->n_evaluated : 0;
}

void rl_metrics_write(metrics_log *ml, int step, const rl_step_summary *s, const rl_rollout_stats *rs,
                      const rl_update_stats *us, double lr, double step_s) {
    char key[64];
    metrics_begin(ml, step);
    metrics_add(ml, "reward_mean", s->reward_mean_all);
    for (int t = 0; t < s->max_turns; t++) {
        snprintf(key, sizeof key, "reward_mean_turn%d", t + 1);
        metrics_add(ml, key, s->reward_mean[t]);
        snprintf(key, sizeof key, "reward_std_turn%d", t + 1);
        metrics_add(ml, key, s->reward_std[t]);
    }
    metrics_add(ml, "fast1", s->fast1);
    metrics_add(ml, "correct_rate", s->correct_rate);
    metrics_add(ml, "hack_rate", s->hack_rate);
    metrics_add(ml, "compile_error_rate", s->compile_error_rate);
    metrics_add(ml, "no_code_rate", s->no_code_rate);
    metrics_add(ml, "timeout_rate", s->timeout_rate);
    metrics_add(ml, "error_rate", s->error_rate);
    metrics_add(ml, "judge_lost", (double)s->judge_lost);
    metrics_add(ml, "coverage_mean", s->coverage_mean);
    metrics_add(ml, "speedup_mean", s->speedup_mean);
    metrics_add(ml, "prs_drop_rate", s->prs_drop_rate);
    metrics_add(ml, "response_len_mean", s->response_len_mean);
    metrics_add(ml, "loss", us->loss);
    metrics_add(ml, "clip_frac", us->ppo.clip_frac_low + us->ppo.clip_frac_high);
    metrics_add(ml, "clip_frac_low", us->ppo.clip_frac_low);
    metrics_add(ml, "clip_frac_high", us->ppo.clip_frac_high);
    metrics_add(ml, "approx_kl", us->ppo.approx_kl);
    metrics_add(ml, "ref_kl", us->ppo.ref_kl);
    metrics_add(ml, "entropy", us->entropy);
    metrics_add(ml, "logprob_mismatch_mean", us->ppo.mismatch_mean);
    metrics_add(ml, "logprob_mismatch_max", us->ppo.mismatch_max);
    metrics_add(ml, "tis_mean", us->ppo.tis_mean);
    metrics_add(ml, "grad_norm", us->grad_norm);
    metrics_add(ml, "lr", lr);
    metrics_add(ml, "rollout_s", rs->generate_s);
    metrics_add(ml, "env_s", rs->env_s);
    metrics_add(ml, "train_s", us->train_s);
    metrics_add(ml, "step_s", step_s);
    metrics_add(ml, "rollout_tokens_per_s", rs->generate_s > 0 ? rs->sampled_tokens / rs->generate_s : 0);
    metrics_add(ml, "train_tokens_per_s", us->train_s > 0 ? us->train_tokens / us->train_s : 0);
    metrics_add(ml, "mem_bytes", (double)us->mem_bytes);
    metrics_add(ml, "mem_base", (double)us->mem_base);
    metrics_add(ml, "mem_rollout_peak", (double)us->mem_rollout_peak);
    metrics_add(ml, "mem_train_peak", (double)us->mem_train_peak);
    metrics_add(ml, "mem_infer_copy", (double)us->mem_infer_copy);
    metrics_add(ml, "mem_kv_cache", (double)us->mem_kv_cache);
    metrics_end(ml);
}

void rl_metrics_print(int step, int steps, const rl_step_summary *s, const rl_rollout_stats *rs,
                      const rl_update_stats *us, double step_s) {
    printf("step %5d/%d | reward %.3f", step, steps, s->reward_mean_all);
    for (int t = 0; t < s->max_turns; t++)
        if (s->n_turn[t]) printf(" t%d %.3f", t + 1, s->reward_mean[t]);
    printf(" | fast@1 %.2f correct %.2f hack %.2f | kl %.4f clip %.3f | gnorm %.3f | gen %.1fs env %.1fs train %.1fs "
           "(%.1fs)\n",
           s->fast1, s->correct_rate, s->hack_rate, us->ppo.approx_kl,
           us->ppo.clip_frac_low + us->ppo.clip_frac_high, us->grad_norm, rs->generate_s, rs->env_s, us->train_s,
           step_s);
    if (s->judge_lost > 0)
        printf("step %5d/%d | judge lost %ld: KernelGym stayed unreachable, those evaluations were scored 0\n", step,
               steps, s->judge_lost);
    fflush(stdout);
}
