/* optim.h: AdamW over the model's flat parameter buffers, with global
 * gradient-norm clipping. State (fp32 moments, and fp32 masters where the
 * parameters are stored in bf16) uses the parameter layout of params.h, so a
 * checkpoint or a ZeRO shard is a plain slice of it. Weight decay applies to
 * matrices only, not to norm weights and biases. */
#ifndef DK_OPTIM_H
#define DK_OPTIM_H

#include "kernels/ops.h"
#include "model/params.h"

typedef struct {
    float beta1, beta2, eps, weight_decay, grad_clip; /* grad_clip <= 0: no clipping */
} optim_config;

typedef struct {
    optim_config cfg;
    param_layout pl;
    param_buffers m, v;   /* fp32 moments, on the ctx's device */
    param_buffers master; /* fp32 masters; unused (NULL buffers) when params are fp32 */
    int has_master;
    int t;                /* steps taken */
} optim;

/* Allocates state for params (act buffers) on ctx; copies masters from params. */
void optim_init(optim *o, ops_ctx *ctx, const optim_config *cfg, const model_config *mc, const param_buffers *params);
void optim_free(optim *o, ops_ctx *ctx);
/* Global L2 norm of all gradients (before clipping). */
double optim_grad_norm(ops_ctx *ctx, const param_layout *pl, const param_buffers *grads);
/* One step: clips by the global norm, updates params; returns the pre-clip norm. */
double optim_step(optim *o, ops_ctx *ctx, param_buffers *params, const param_buffers *grads, double lr);

#endif
