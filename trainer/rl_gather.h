/* rl_gather.h: a data-parallel RL step's rollouts on every rank. Each rank
 * rolls out its own tasks of the batch; the advantages, PRS draws, loss
 * denominators, metrics and the rollout dump need the whole batch, so the
 * rollouts (tokens, sampled marks, logprobs, turn bounds and outcomes) are
 * serialised, all-gathered over the host and rebuilt in global order. The
 * tokens make up most of it, a few bytes each: small next to a step's
 * generation. */
#ifndef DK_RL_GATHER_H
#define DK_RL_GATHER_H

#include "dist/comm.h"
#include "rl/rollout.h"

/* The tasks [*t0, *t1) of n_tasks that rank `rank` of `world` rolls out:
 * contiguous, as even as whole tasks allow, in task order. */
void rl_gather_task_range(int n_tasks, int rank, int world, int *t0, int *t1);

/* local[n_local]: this rank's rollouts, whose `task` counts from task0 (its
 * first task in the batch). out[n_total] receives every rank's in global
 * order (rank order, each rank's own order), with `task` in batch numbering;
 * their conversations are copies owned by out (rl_gather_free). Collective.
 * Fails when the ranks together sent other than n_total rollouts. */
dk_status rl_gather_rollouts(comm *c, const rl_rollout *local, int n_local, int task0, rl_rollout *out,
                             int n_total);
void rl_gather_free(rl_rollout *r, int n);

#endif
