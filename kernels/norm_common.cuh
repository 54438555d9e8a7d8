/* norm_common.cuh: the row-normalisation kernels behind rmsnorm.cu and
 * layernorm.cu (template flag LN picks LayerNorm). Math follows the CPU
 * reference (rmsnorm_cpu.c, layernorm_cpu.c) in fp32:
 *   RMSNorm   out = (x * r) * w,                     r = 1/sqrt(mean(x^2) + eps)
 *             dx  = r w g - r^3 / C * x * sum(g w x),  dw += sum_rows g * (x * r)
 *   LayerNorm out = ((x - mu) * r) * w + b,          r = 1/sqrt(var + eps)
 *             dx  = r (g w - mean(g w) - xhat mean(g w xhat)),
 *             dw += sum_rows g * xhat,  db += sum_rows g
 *
 * Fast path (C % 8 == 0, 16-byte aligned buffers, C <= 16384): a team of TPR
 * threads owns a row; lane l of the team holds the row's 16-byte vectors l,
 * l + TPR, ... (VPL <= 4 of them) in registers, so the row is read once and
 * written once. TPR is the smallest power of two that keeps VPL <= 4 (4 for
 * a 128-wide q/k-norm row, 32 for C = 1024, 256 for C = 5120). The weight
 * vectors are re-read per row from L1 (see ld_weight). Row statistics
 * are team reductions (warp shuffles, plus shared memory for teams wider than
 * a warp) in a fixed order.
 *
 * Weight gradients are deterministic without atomics: each thread adds its
 * columns' terms over its rows in registers, the teams of a block combine in
 * shared memory in team order, each block writes one row of partials to
 * scratch, and colsum_partials_acc adds the blocks' rows in a fixed order
 * into dw (+=). The grid is fixed by N, C and the multiprocessor count.
 *
 * A decode step's few rows (cuda_pdl_rows) start the fast forward as
 * a programmatic dependent launch (cuda_common.cuh): the launch overlaps
 * the product before, and the product after streams its weights early.
 *
 * Other shapes take a scalar path: one warp per row, statistics by strided
 * passes over the row, weight gradients by a separate column reduction that
 * runs before dx is written (so dx may alias dout, as on the CPU). */
#ifndef DK_NORM_COMMON_CUH
#define DK_NORM_COMMON_CUH

#include "kernels/rope_common.cuh"

#define NORM_MAX_TPR 512

/* The rotation the RMSNorm kernels apply themselves (template flag RP, for
 * ops_rmsnorm_rope_*): row r is head r % heads of token r / heads, at
 * position pos[r / heads]. Taken where a lane holds both halves of its
 * rotation pairs: vector j and j + VPL/2 (C / 8 == VPL * tpr, VPL even). */
struct norm_rope {
    const int32_t *pos;
    int heads;
    float theta;
};
/* What the kernels take where there is no rotation (their RP is false). */
static constexpr norm_rope NORM_NO_ROPE = {NULL, 1, 0.0f};

static inline bool norm_rope_fits(int tpr, int vpl, int C) {
    return tpr > 0 && vpl % 2 == 0 && C / 8 == vpl * tpr && C / 2 <= ROPE_MAX_HALF;
}

/* ---- fast path ----------------------------------------------------------------- */

/* The weight row is the same for every row of the batch and stays in L1;
 * it is re-read per row rather than held (fp32 copies of it would take 32
 * registers a thread and halve the resident warps). The volatile asm keeps
 * the compiler from hoisting the load out of the row loop. */
__device__ __forceinline__ uint4 ld_weight(const bf16 *p) {
    uint4 u;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p));
    return u;
}

template <int VPL, bool LN, bool RP>
__global__ void __launch_bounds__(NORM_MAX_TPR)
    norm_fwd_vec(bf16 *__restrict__ out, float *__restrict__ mean_out, float *__restrict__ rstd_out,
                 const bf16 *__restrict__ x, const bf16 *__restrict__ w, const bf16 *__restrict__ b, int N, int C,
                 float eps, int tpr, norm_rope rp) {
    static_assert(!(RP && LN), "the rotation follows an RMSNorm only");
    __shared__ float sh[32];
    __shared__ float inv_freq[RP ? ROPE_MAX_HALF : 1];
    if (RP) rope_inv_freq(inv_freq, C / 2, C, rp.theta); /* weights of a kind: before the wait */
    const int NV = C >> 3, tpb = blockDim.x / tpr, team = threadIdx.x / tpr, lane = threadIdx.x % tpr;
    const float inv_c = 1.0f / (float)C;
    /* Software pipelining: the next row's loads are issued before this
     * row's reductions and stores, so a thread always has a row in flight. */
    const int step = gridDim.x * tpb;
    uint4 xv[VPL], xn[VPL];
    auto load_row = [&](uint4 *dst, int r) {
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            int v = lane + j * tpr;
            dst[j] = (r < N && v < NV) ? ld_stream(x + (size_t)r * C + 8 * v) : make_uint4(0, 0, 0, 0);
        }
    };
    pdl_wait(); /* under a programmatic dependent launch (few decode rows): x is the kernel before's output */
    pdl_launch_dependents();
    load_row(xv, blockIdx.x * tpb + team);
    for (int base = blockIdx.x * tpb; base < N; base += step) {
        const int row = base + team;
        const bool valid = row < N;
        load_row(xn, row + step);
        float mu = 0.0f;
        if (LN) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < VPL; j++) {
                float xf[8];
                bf16x8_to_f32(xv[j], xf);
#pragma unroll
                for (int k = 0; k < 8; k++) s += xf[k];
            }
            mu = team_sum(s, tpr, sh) * inv_c;
        }
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            if (lane + j * tpr >= NV) continue; /* empty slots are zeros, but x - mu is not */
            float xf[8];
            bf16x8_to_f32(xv[j], xf);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float d = xf[k] - mu;
                ss += d * d;
            }
        }
        ss = team_sum(ss, tpr, sh);
        const float r = 1.0f / sqrtf(ss * inv_c + eps);
        if (valid) {
            bf16 *orow = out + (size_t)row * C;
            /* Vector j of the output row, rounded to bf16 as stored. */
            auto out_vec = [&](int j) {
                const int v = lane + j * tpr;
                float xf[8], wf[8], bf[8], o[8];
                bf16x8_to_f32(xv[j], xf);
                bf16x8_to_f32(ld_weight(w + 8 * v), wf);
                bf16x8_to_f32((LN && b) ? ld_weight(b + 8 * v) : make_uint4(0, 0, 0, 0), bf);
#pragma unroll
                for (int k = 0; k < 8; k++)
                    o[k] = LN ? ((xf[k] - mu) * r) * wf[k] + bf[k] : (xf[k] * r) * wf[k];
                return f32_to_bf16x8(o);
            };
            if constexpr (RP) {
                /* The rounded row rotated as ops_rope_forward rotates what
                 * ops_rmsnorm_forward stored, a pair of vectors (j, j +
                 * VPL/2) at a time so that one set of angles is live. */
                const float p = (float)rp.pos[row / rp.heads];
#pragma unroll
                for (int j = 0; j < VPL / 2; j++) {
                    uint4 a = out_vec(j), c = out_vec(j + VPL / 2);
                    float cs[8], sn[8];
                    rope_angles8(cs, sn, inv_freq, 8 * (lane + j * tpr), p, 1.0f);
                    rope_rotate(a, c, cs, sn);
                    st_stream(orow + 8 * (lane + j * tpr), a);
                    st_stream(orow + 8 * (lane + (j + VPL / 2) * tpr), c);
                }
            } else {
#pragma unroll
                for (int j = 0; j < VPL; j++)
                    if (lane + j * tpr < NV) st_stream(orow + 8 * (lane + j * tpr), out_vec(j));
            }
            if (lane == 0) {
                rstd_out[row] = r;
                if (LN) mean_out[row] = mu;
            }
        }
#pragma unroll
        for (int j = 0; j < VPL; j++) xv[j] = xn[j];
    }
}

/* Writes partial_w[blockIdx.x][C] (and partial_b when LN and DB). ACC:
 * dx += the input gradient (RMSNorm only; dx is then not dout), its rows
 * read with dout and x and the sum rounded once. */
template <int VPL, bool LN, bool DB, bool ACC, bool RP>
__global__ void __launch_bounds__(NORM_MAX_TPR)
    norm_bwd_vec(bf16 *dx, float *__restrict__ partial_w, float *__restrict__ partial_b, const bf16 *dout,
                 const bf16 *__restrict__ x, const bf16 *__restrict__ w, const float *__restrict__ mean,
                 const float *__restrict__ rstd, int N, int C, int tpr, norm_rope rp) {
    static_assert(!(RP && (LN || ACC)), "the inverse rotation precedes a plain RMSNorm backward only");
    extern __shared__ float team_acc[]; /* [tpb][C] dw, then [tpb][C] db, when tpb > 1 */
    __shared__ float sh[32];
    __shared__ float inv_freq[RP ? ROPE_MAX_HALF : 1];
    if (RP) rope_inv_freq(inv_freq, C / 2, C, rp.theta);
    pdl_launch_dependents();
    const int NV = C >> 3, tpb = blockDim.x / tpr, team = threadIdx.x / tpr, lane = threadIdx.x % tpr;
    const float inv_c = 1.0f / (float)C;
    float acc_w[VPL][8], acc_b[VPL][8];
#pragma unroll
    for (int j = 0; j < VPL; j++) {
#pragma unroll
        for (int k = 0; k < 8; k++) acc_w[j][k] = acc_b[j][k] = 0.0f;
    }
    /* RMSNorm at up to 2 vectors a lane pipelines its rows as the forward
     * does: the next row's dout and x are in flight during this row's
     * reductions and stores. (Wider lanes, or the LayerNorm variant's second
     * accumulator, leave no registers for them.) */
    static_assert(!(LN && ACC), "only the RMSNorm backward accumulates");
    constexpr bool PIPE = !LN && VPL <= 2;
    constexpr int VA = ACC ? VPL : 1; /* dx's old rows, held only when accumulating */
    const int step = gridDim.x * tpb;
    uint4 gv[VPL], xv[VPL], gn[VPL], xn[VPL], av[VA], an[VA];
    auto load_row = [&](uint4 *gd, uint4 *xd, uint4 *ad, int r) {
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            const int v = lane + j * tpr;
            const bool in = r < N && v < NV;
            gd[j] = in ? ld_stream(dout + (size_t)r * C + 8 * v) : make_uint4(0, 0, 0, 0);
            xd[j] = in ? ld_stream(x + (size_t)r * C + 8 * v) : make_uint4(0, 0, 0, 0);
            if (ACC) ad[j] = in ? ld_stream(dx + (size_t)r * C + 8 * v) : make_uint4(0, 0, 0, 0);
        }
    };
    if (PIPE) load_row(gv, xv, av, blockIdx.x * tpb + team);
    for (int base = blockIdx.x * tpb; base < N; base += step) {
        const int row = base + team;
        const bool valid = row < N;
        const size_t off = (size_t)row * C;
        if (PIPE) load_row(gn, xn, an, row + step);
        else load_row(gv, xv, av, row);
        if (RP && valid) {
            /* The incoming gradient rotated back and rounded to bf16, as
             * ops_rope_backward leaves it in place. */
            const float p = (float)rp.pos[row / rp.heads];
#pragma unroll
            for (int j = 0; j < VPL / 2; j++) {
                float cs[8], sn[8];
                rope_angles8(cs, sn, inv_freq, 8 * (lane + j * tpr), p, -1.0f);
                rope_rotate(gv[j], gv[j + VPL / 2], cs, sn);
            }
        }
        const float r = valid ? rstd[row] : 0.0f;
        const float mu = (LN && valid) ? mean[row] : 0.0f;
        /* Row sums: RMS s1 = sum g w x; LN s1 = sum g w, s2 = sum g w xhat.
         * Empty slots hold g = 0, so they add nothing. */
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            int v = lane + j * tpr;
            float gf[8], xf[8], wf[8];
            bf16x8_to_f32(gv[j], gf);
            bf16x8_to_f32(xv[j], xf);
            bf16x8_to_f32(v < NV ? ld_weight(w + 8 * v) : make_uint4(0, 0, 0, 0), wf);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float gw = gf[k] * wf[k];
                if (LN) {
                    s1 += gw;
                    s2 += gw * ((xf[k] - mu) * r);
                } else {
                    s1 += gw * xf[k];
                }
            }
        }
        s1 = team_sum(s1, tpr, sh);
        if (LN) s2 = team_sum(s2, tpr, sh);
        if (!valid) {
            if (PIPE)
#pragma unroll
                for (int j = 0; j < VPL; j++) {
                    gv[j] = gn[j], xv[j] = xn[j];
                    if (ACC) av[j] = an[j];
                }
            continue;
        }
        const float kr = r * r * r * s1 * inv_c; /* RMS */
        const float m1 = s1 * inv_c, m2 = s2 * inv_c; /* LN */
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            int v = lane + j * tpr;
            if (v >= NV) continue;
            float gf[8], xf[8], wf[8], d[8];
            bf16x8_to_f32(gv[j], gf);
            bf16x8_to_f32(xv[j], xf);
            bf16x8_to_f32(ld_weight(w + 8 * v), wf);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (LN) {
                    float xhat = (xf[k] - mu) * r;
                    d[k] = r * (gf[k] * wf[k] - m1 - xhat * m2);
                    acc_w[j][k] += gf[k] * xhat;
                    if (DB) acc_b[j][k] += gf[k];
                } else {
                    d[k] = r * wf[k] * gf[k] - kr * xf[k];
                    acc_w[j][k] += gf[k] * (xf[k] * r);
                }
            }
            if (ACC) {
                float old[8];
                bf16x8_to_f32(av[ACC ? j : 0], old);
#pragma unroll
                for (int k = 0; k < 8; k++) d[k] += old[k];
            }
            st_stream(dx + off + 8 * v, f32_to_bf16x8(d));
        }
        if (PIPE)
#pragma unroll
            for (int j = 0; j < VPL; j++) {
                gv[j] = gn[j], xv[j] = xn[j];
                if (ACC) av[j] = an[j];
            }
    }
    /* This block's row of partial sums. */
    float *pw = partial_w + (size_t)blockIdx.x * C, *pb = DB ? partial_b + (size_t)blockIdx.x * C : NULL;
    if (tpb == 1) {
#pragma unroll
        for (int j = 0; j < VPL; j++) {
            int v = lane + j * tpr;
            if (v >= NV) continue;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                pw[8 * v + k] = acc_w[j][k];
                if (DB) pb[8 * v + k] = acc_b[j][k];
            }
        }
        return;
    }
    float *tw = team_acc, *tb = team_acc + (size_t)tpb * C;
#pragma unroll
    for (int j = 0; j < VPL; j++) {
        int v = lane + j * tpr;
        if (v >= NV) continue;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            tw[(size_t)team * C + 8 * v + k] = acc_w[j][k];
            if (DB) tb[(size_t)team * C + 8 * v + k] = acc_b[j][k];
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sw = 0.0f, sb = 0.0f;
        for (int t = 0; t < tpb; t++) {
            sw += tw[(size_t)t * C + c];
            if (DB) sb += tb[(size_t)t * C + c];
        }
        pw[c] = sw;
        if (DB) pb[c] = sb;
    }
}

/* ---- scalar path ------------------------------------------------------------------ */

#define NORM_SCALAR_WARPS 8

__device__ __forceinline__ float ldf(const bf16 *p) { return __bfloat162float(*p); }

template <bool LN>
__global__ void norm_fwd_scalar(bf16 *out, float *mean_out, float *rstd_out, const bf16 *x, const bf16 *w,
                                const bf16 *b, int N, int C, float eps) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * NORM_SCALAR_WARPS + (threadIdx.x >> 5);
    if (row >= N) return; /* warp-uniform */
    const bf16 *xr = x + (size_t)row * C;
    float mu = 0.0f;
    if (LN) {
        float s = 0.0f;
        for (int c = lane; c < C; c += 32) s += ldf(xr + c);
        mu = warp_sum(s) / (float)C;
    }
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = ldf(xr + c) - mu;
        ss += d * d;
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)C + eps);
    bf16 *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float y = LN ? ((ldf(xr + c) - mu) * r) * ldf(w + c) : (ldf(xr + c) * r) * ldf(w + c);
        if (LN && b) y += ldf(b + c);
        o[c] = __float2bfloat16_rn(y);
    }
    if (lane == 0) {
        rstd_out[row] = r;
        if (LN) mean_out[row] = mu;
    }
}

template <bool LN>
__global__ void norm_bwd_scalar(bf16 *dx, const bf16 *dout, const bf16 *x, const bf16 *w, const float *mean,
                                const float *rstd, int N, int C, int acc) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * NORM_SCALAR_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    const float r = rstd[row], mu = LN ? mean[row] : 0.0f;
    float s1 = 0.0f, s2 = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float gw = ldf(dout + off + c) * ldf(w + c), xv = ldf(x + off + c);
        if (LN) {
            s1 += gw;
            s2 += gw * ((xv - mu) * r);
        } else {
            s1 += gw * xv;
        }
    }
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
    const float kr = r * r * r * s1 / (float)C, m1 = s1 / (float)C, m2 = s2 / (float)C;
    /* Each lane reads then writes only its own elements: dx may be dout
     * (when not accumulating). */
    for (int c = lane; c < C; c += 32) {
        float g = ldf(dout + off + c), xv = ldf(x + off + c), wf = ldf(w + c);
        float d = LN ? r * (g * wf - m1 - ((xv - mu) * r) * m2) : r * wf * g - kr * xv;
        if (acc) d += ldf(dx + off + c);
        dx[off + c] = __float2bfloat16_rn(d);
    }
}

/* Column partials of the weight (and bias) gradient: block (bx, by) sums
 * rows by*8 + ty, stepping by gridDim.y*8, of columns bx*32 + tx. */
template <bool LN, bool DB>
__global__ void __launch_bounds__(256) norm_dw_scalar(float *partial_w, float *partial_b, const bf16 *dout,
                                                      const bf16 *x, const float *mean, const float *rstd, int N,
                                                      int C) {
    __shared__ float shw[8][32], shb[8][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (int r = blockIdx.y * 8 + threadIdx.y; r < N; r += gridDim.y * 8) {
            float g = ldf(dout + (size_t)r * C + c), xv = ldf(x + (size_t)r * C + c);
            float xhat = LN ? (xv - mean[r]) * rstd[r] : xv * rstd[r];
            aw += g * xhat;
            if (DB) ab += g;
        }
    shw[threadIdx.y][threadIdx.x] = aw;
    shb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float sw = 0.0f, sb = 0.0f;
        for (int y = 0; y < 8; y++) sw += shw[y][threadIdx.x], sb += shb[y][threadIdx.x];
        partial_w[(size_t)blockIdx.y * C + c] = sw;
        if (DB) partial_b[(size_t)blockIdx.y * C + c] = sb;
    }
}

/* ---- launchers ----------------------------------------------------------------------- */

/* Team width and vectors per lane for the fast path, or 0 for the scalar
 * path: the narrowest power-of-two team that keeps VPL <= max_vpl (4: every
 * thread has up to 4 independent 16-byte loads in flight; 4 threads for a
 * 128-wide q/k-norm row, a warp for C = 1024, 256 threads for C = 5120). */
static inline int norm_plan(int C, int *vpl, int max_vpl = 4) {
    if (C <= 0 || C % 8 != 0) return 0;
    int nv = C / 8, need = (nv + max_vpl - 1) / max_vpl, tpr = 1;
    while (tpr < need) tpr <<= 1;
    if (tpr > NORM_MAX_TPR) return 0;
    *vpl = (nv + tpr - 1) / tpr;
    return tpr;
}

/* A programmatic dependent launch for the few rows of a decode step
 * (cuda_common.cuh, cuda_pdl_rows). */
template <int VPL, bool LN>
static void norm_fwd_vec_launch(const ops_ctx *ctx, size_t work, int block, cudaStream_t st, bf16 *o, float *mean,
                                float *rstd, const bf16 *xb, const bf16 *wb, const bf16 *bb, int N, int C, float eps,
                                int tpr, const norm_rope *rope) {
    if constexpr (!LN && VPL % 2 == 0) {
        if (rope) {
            unsigned grid = grid_resident(ctx, norm_fwd_vec<VPL, LN, true>, block, 0, work);
            cuda_launch_pdl(st, cuda_pdl_rows(ctx, N), norm_fwd_vec<VPL, LN, true>, dim3(grid), dim3(block), 0,
                            o, mean, rstd, xb, wb, bb, N, C, eps, tpr, *rope);
            return;
        }
    }
    unsigned grid = grid_resident(ctx, norm_fwd_vec<VPL, LN, false>, block, 0, work);
    cuda_launch_pdl(st, cuda_pdl_rows(ctx, N), norm_fwd_vec<VPL, LN, false>, dim3(grid), dim3(block), 0,
                    o, mean, rstd, xb, wb, bb, N, C, eps, tpr, NORM_NO_ROPE);
}

/* rope: also rotate the output (RMSNorm only); then returns 0 without
 * launching anything where the plan does not allow it (norm_rope_fits), for
 * the caller to run the ops in turn. Otherwise 1. */
template <bool LN>
static int norm_forward(ops_ctx *ctx, void *out, float *mean, float *rstd, const void *x, const void *w,
                        const void *b, int N, int C, float eps, const norm_rope *rope = NULL) {
    if (N <= 0 || C <= 0) return 1;
    cudaStream_t st = ctx_stream(ctx);
    int vpl = 0, tpr = norm_plan(C, &vpl);
    if (tpr && !(is_aligned16(out) && is_aligned16(x) && is_aligned16(w) && (!b || is_aligned16(b)))) tpr = 0;
    if (rope && (LN || !norm_rope_fits(tpr, vpl, C))) return 0;
    bf16 *o = (bf16 *)out;
    const bf16 *xb = (const bf16 *)x, *wb = (const bf16 *)w, *bb = (const bf16 *)b;
    if (!tpr) {
        norm_fwd_scalar<LN><<<div_up((size_t)N, NORM_SCALAR_WARPS), 32 * NORM_SCALAR_WARPS, 0, st>>>(o, mean, rstd, xb,
                                                                                                   wb, bb, N, C, eps);
        CUDA_LAUNCH_CHECK();
        return 1;
    }
    int block = tpr > 256 ? tpr : 256, tpb = block / tpr;
    size_t work = div_up((size_t)N, (size_t)tpb);
    switch (vpl) {
    case 1: norm_fwd_vec_launch<1, LN>(ctx, work, block, st, o, mean, rstd, xb, wb, bb, N, C, eps, tpr, rope); break;
    case 2: norm_fwd_vec_launch<2, LN>(ctx, work, block, st, o, mean, rstd, xb, wb, bb, N, C, eps, tpr, rope); break;
    case 3: norm_fwd_vec_launch<3, LN>(ctx, work, block, st, o, mean, rstd, xb, wb, bb, N, C, eps, tpr, rope); break;
    default: norm_fwd_vec_launch<4, LN>(ctx, work, block, st, o, mean, rstd, xb, wb, bb, N, C, eps, tpr, rope); break;
    }
    CUDA_LAUNCH_CHECK();
    return 1;
}

typedef void (*norm_bwd_fn)(bf16 *, float *, float *, const bf16 *, const bf16 *, const bf16 *, const float *,
                            const float *, int, int, int, norm_rope);

/* The backward's vector instance: LayerNorm with or without db, RMSNorm
 * writing dx or adding into it, or rotating the incoming gradient back
 * first (rope; even VPL only, norm_rope_fits). */
template <int VPL, bool LN>
static norm_bwd_fn norm_bwd_kernel(bool with_b, int acc, bool rope) {
    if constexpr (LN) {
        return with_b ? norm_bwd_vec<VPL, LN, true, false, false> : norm_bwd_vec<VPL, LN, false, false, false>;
    } else {
        if constexpr (VPL % 2 == 0)
            if (rope) return norm_bwd_vec<VPL, LN, false, false, true>;
        return acc ? norm_bwd_vec<VPL, LN, false, true, false> : norm_bwd_vec<VPL, LN, false, false, false>;
    }
}

/* rope: rotate the incoming gradient back first (RMSNorm, acc 0); then
 * returns 0 without launching anything where the plan does not allow it
 * (norm_rope_fits), for the caller to run the ops in turn. Otherwise 1. */
template <bool LN>
static int norm_backward(ops_ctx *ctx, void *dx, float *dw, float *db, const void *dout, const void *x,
                         const void *w, const float *mean, const float *rstd, int N, int C, int acc,
                         const char *op, const norm_rope *rope = NULL) {
    if (N <= 0 || C <= 0) return 1;
    if (acc && (LN || dx == dout)) DK_ABORT("%s: accumulate needs the RMSNorm form and dx distinct from dout", op);
    cudaStream_t st = ctx_stream(ctx);
    const bool with_b = LN && db;
    /* The RMSNorm backward pipelines two rows of at most 2 vectors a lane
     * where a team of up to 256 threads covers the row (C <= 4096); wider
     * rows take the plain plan (on an H200 at C = 5120, 512-thread teams of
     * 2 vectors ran at 0.56 of the copy rate against 0.62 for 256 threads
     * of 3; at C = 4096 the pipelined plan ran at 0.64 against 0.61). */
    int vpl = 0, tpr = LN ? 0 : norm_plan(C, &vpl, 2);
    if (tpr > 256) tpr = 0;
    if (!tpr) tpr = norm_plan(C, &vpl);
    if (tpr && !(is_aligned16(dx) && is_aligned16(dout) && is_aligned16(x) && is_aligned16(w))) tpr = 0;
    if (rope && (LN || acc || !norm_rope_fits(tpr, vpl, C))) return 0;
    const norm_rope rp = rope ? *rope : NORM_NO_ROPE;
    bf16 *d = (bf16 *)dx;
    const bf16 *g = (const bf16 *)dout, *xb = (const bf16 *)x, *wb = (const bf16 *)w;
    const size_t row_bytes = (size_t)C * sizeof(float) * (with_b ? 2 : 1);

    if (!tpr) {
        /* Weight gradient first: dx may overwrite dout. */
        size_t want = div_up((size_t)cuda_sm_count(ctx) * 4, div_up((size_t)C, 32));
        size_t most = div_up((size_t)N, 8 * 16), fit = ctx->scratch_size / row_bytes;
        size_t S = want < most ? want : most;
        if (S > fit) S = fit;
        if (S > 65535) S = 65535;
        if (S < 1) S = 1;
        float *pw = (float *)ctx_scratch(ctx, S * row_bytes, op), *pb = pw + S * (size_t)C;
        dim3 grid(div_up((size_t)C, 32), (unsigned)S), block(32, 8);
        if (with_b) norm_dw_scalar<LN, true><<<grid, block, 0, st>>>(pw, pb, g, xb, mean, rstd, N, C);
        else norm_dw_scalar<LN, false><<<grid, block, 0, st>>>(pw, pb, g, xb, mean, rstd, N, C);
        CUDA_LAUNCH_CHECK();
        norm_bwd_scalar<LN><<<div_up((size_t)N, NORM_SCALAR_WARPS), 32 * NORM_SCALAR_WARPS, 0, st>>>(d, g, xb, wb,
                                                                                                   mean, rstd, N, C, acc);
        CUDA_LAUNCH_CHECK();
        colsum_partials_launch(st, dw, pw, (int)S, C);
        CUDA_LAUNCH_CHECK();
        if (with_b) {
            colsum_partials_launch(st, db, pb, (int)S, C);
            CUDA_LAUNCH_CHECK();
        }
        return 1;
    }

    int block = tpr > 128 ? tpr : 128, tpb = block / tpr;
    size_t smem = tpb > 1 ? (size_t)tpb * row_bytes : 0;
    size_t work = div_up((size_t)N, (size_t)tpb), fit = ctx->scratch_size / row_bytes;
    norm_bwd_fn k, plain;
    switch (vpl) {
    case 1: k = norm_bwd_kernel<1, LN>(with_b, acc, rope), plain = norm_bwd_kernel<1, LN>(with_b, acc, false); break;
    case 2: k = norm_bwd_kernel<2, LN>(with_b, acc, rope), plain = norm_bwd_kernel<2, LN>(with_b, acc, false); break;
    case 3: k = norm_bwd_kernel<3, LN>(with_b, acc, rope), plain = norm_bwd_kernel<3, LN>(with_b, acc, false); break;
    default: k = norm_bwd_kernel<4, LN>(with_b, acc, rope), plain = norm_bwd_kernel<4, LN>(with_b, acc, false); break;
    }
    /* Resident blocks only, so the grid also bounds the rows of partial
     * sums (one per block), and no more than the scratch holds. The plain
     * instance's count also for the rotating one: the same blocks sum the
     * same rows, so its weight gradient has the plain op's bits. */
    unsigned grid = grid_resident(ctx, plain, block, smem, work);
    if (grid > fit) grid = (unsigned)(fit > 0 ? fit : 1);
    float *pw = (float *)ctx_scratch(ctx, grid * row_bytes, op);
    float *pb = with_b ? pw + (size_t)grid * C : NULL;
    k<<<grid, block, smem, st>>>(d, pw, pb, g, xb, wb, mean, rstd, N, C, tpr, rp);
    CUDA_LAUNCH_CHECK();
    colsum_partials_launch(st, dw, pw, (int)grid, C);
    CUDA_LAUNCH_CHECK();
    if (with_b) {
        colsum_partials_launch(st, db, pb, (int)grid, C);
        CUDA_LAUNCH_CHECK();
    }
    return 1;
}

#endif
