/* score_cmd.c: the `kernelgym score` pipeline (score_cmd.h): jobs from the
 * matched solutions, a client (in-process, a private fleet or a given Redis),
 * the wait with progress lines, then the report. */
#include "env/score_cmd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "env/client.h"
#include "env/score.h"

/* One eval job per task that has a solution; slot k of jobs is item idx[k].
 * A task or solution that cannot be read gets an error result in place.
 * texts[] holds the sources the jobs point to (2 per slot). */
static int score_jobs(kg_score_report *rep, const kg_job_options *opt, kg_job *jobs, int *idx, char **texts) {
    int n = 0;
    for (int i = 0; i < rep->n; i++) {
        kg_score_item *it = &rep->items[i];
        if (!it->solution_path) continue;
        size_t tl = 0, sl = 0;
        char *t = NULL, *s = NULL;
        dk_status rs = dk_read_file(it->task_path, &t, &tl);
        if (rs == DK_OK) rs = dk_read_file(it->solution_path, &s, &sl);
        if (rs == DK_OK && (strlen(t) != tl || strlen(s) != sl))
            rs = dk_fail(DK_ERR_RUNTIME, "%s: contains a NUL byte", strlen(t) != tl ? it->task_path : it->solution_path);
        if (rs != DK_OK) {
            cJSON *r = kg_result_make_error(it->task_name, KG_STATUS_ERROR, dk_error());
            kg_result_from_json(r, &it->result);
            cJSON_Delete(r);
            free(t);
            free(s);
            continue;
        }
        kg_job_init(&jobs[n]);
        jobs[n].task_source = texts[2 * n] = t;
        jobs[n].candidate_source = texts[2 * n + 1] = s;
        jobs[n].task_name = it->task_name;
        jobs[n].opt = *opt;
        idx[n++] = i;
    }
    return n;
}

static dk_status write_json(const kg_score_report *rep, const kg_score_config *c) {
    cJSON *j = kg_score_to_json(rep, c->tasks_dir, c->solutions_dir);
    char *s = cJSON_Print(j);
    dk_status st = dk_write_file(c->json_out, s, strlen(s));
    free(s);
    cJSON_Delete(j);
    return st;
}

dk_status kg_jobs_evaluate(const kg_jobs_where *w, kg_job *jobs, int n, kg_result *res, double wait_s,
                           const volatile sig_atomic_t *stop, const char *label, int *n_done) {
    dk_status st = DK_OK;
    kg_fleet fleet;
    int have_fleet = 0;
    kg_client *cl = NULL;
    *n_done = 0;
    if (w->redis && strcmp(w->redis, "auto") == 0) {
        st = kg_fleet_start(&fleet, &w->fleet);
        have_fleet = st == DK_OK;
        if (st == DK_OK) cl = kg_client_connect(fleet.url, &st);
    } else if (w->redis) {
        cl = kg_client_connect(w->redis, &st);
    } else {
        cl = kg_client_local(&w->eval, &st);
    }
    if (st == DK_OK) st = kg_client_submit_batch(cl, jobs, n, res);
    int last = -1;
    double deadline = dk_now() + wait_s;
    while (st == DK_OK && *n_done < n && !*stop) {
        double left = deadline - dk_now();
        if (left <= 0) break;
        st = kg_client_wait(cl, res, n, left < 2.0 ? left : 2.0, n_done);
        if (*n_done != last) fprintf(stderr, "%s: %d/%d evaluated\n", label, *n_done, n);
        last = *n_done;
        if (have_fleet && kg_fleet_check(&fleet) == 0) {
            st = dk_fail(DK_ERR_RUNTIME, "every worker of the fleet has exited");
            break;
        }
    }
    kg_client_close(cl);
    if (have_fleet) kg_fleet_stop(&fleet, 30.0);
    return st;
}

dk_status kg_score_run(const kg_score_config *c, const volatile sig_atomic_t *stop) {
    kg_score_report rep;
    DK_TRY(kg_score_collect(c->tasks_dir, c->solutions_dir, &rep));
    kg_job *jobs = dk_calloc((size_t)rep.n, sizeof *jobs);
    int *idx = dk_calloc((size_t)rep.n, sizeof *idx);
    char **texts = dk_calloc((size_t)rep.n * 2, sizeof *texts);
    const int n = score_jobs(&rep, &c->opt, jobs, idx, texts);

    kg_result *res = dk_calloc((size_t)(n ? n : 1), sizeof *res);
    int n_done = 0;
    dk_status st = kg_jobs_evaluate(&c->where, jobs, n, res, c->wait_s, stop, "kernelgym score", &n_done);
    if (st == DK_OK) {
        if (n_done < n)
            fprintf(stderr, "kernelgym score: %d solution(s) not evaluated in time count as not fast\n", n - n_done);
        for (int k = 0; k < n; k++) {
            kg_result_free(&rep.items[idx[k]].result);
            rep.items[idx[k]].result = res[k];
            kg_result_init(&res[k]);
        }
        kg_score_compute(&rep);
        kg_score_print(&rep, stdout);
        fflush(stdout);
        if (c->json_out) st = write_json(&rep, c);
    }
    for (int k = 0; k < n; k++) kg_result_free(&res[k]);
    free(res);
    for (int k = 0; k < 2 * rep.n; k++) free(texts[k]);
    free(texts);
    free(jobs);
    free(idx);
    kg_score_free(&rep);
    return st;
}
