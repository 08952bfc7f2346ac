// Products of a weight matrix with one column, for a decoder step: Whisper's logits (51,864
// rows of 384 f16 values) and its linear layers (f16, or q8_0 with the column quantized
// first). ggml-cuda runs these as one thread block per row, or (q8_0) as two kernels, the
// column's quantization then the product; a step's few hundred small kernels are its cost
// (README.md). Here a warp does a row and a q8_0 product quantizes its column itself.
//
// The bits are ggml's: each kernel replays, per row, the threads and sums of the ggml
// kernel it replaces (mmvf.cu's mul_mat_vec_f, mmvq.cu's mul_mat_vec_q with quantize.cu's
// quantize_q8_1) with the same expressions, so the compiler rounds them alike; a bias add
// that follows is taken in, as ggml's own fusion does (the same one rounding).

#include "fusion.cuh"
#include "ggml-cuda/fwht.cuh"
#include "ggml-cuda/mmf.cuh"
#include "ggml-cuda/mmvf.cuh"
#include "ggml-cuda/mmvq.cuh"
#include "ggml-cuda/vecdotq.cuh"

#include <cstdint>

using audiocpp::is_f32_rows;
using audiocpp::other_src;
using audiocpp::overlap;

namespace {

// Rows a thread block does, one a warp.
constexpr int rows_per_block = 4;

// One f16 row of `ncols2` half2 times the column, as ggml's mul_mat_vec_f with
// `block_size` threads does it (ncols_dst 1, no gate): thread t of that block sums the
// half2 at t, t + block_size, ..., in `type_acc`; each warp's sums are reduced by
// butterfly; then the warps' sums, in one warp, zeros after them. Here lane l of a warp
// plays thread l of each of ggml's warps in turn, so each row sees the same additions in
// the same order.
template <typename type_acc, int block_size, int niter, bool has_bias>
__global__ void __launch_bounds__(rows_per_block * WARP_SIZE)
    mat_vec_f16(const half2 * x, const int64_t stride_row2, const float2 * y,
                const float * bias, float * dst, const int ncols2, const int nrows) {
    constexpr int nwarps = block_size / WARP_SIZE;
    const int lane = threadIdx.x;
    const int row = blockIdx.x * rows_per_block + threadIdx.y;
    if (row >= nrows) {
        return;
    }
    x += row * stride_row2;
    // The row's weights first: they do not wait for the kernels this one depends on.
    half2 xv[nwarps][niter];
#pragma unroll
    for (int w = 0; w < nwarps; ++w) {
#pragma unroll
        for (int it = 0; it < niter; ++it) {
            const int col2 = w * WARP_SIZE + lane + it * block_size;
            if (col2 < ncols2) {
                xv[w][it] = x[col2];
            }
        }
    }
    ggml_cuda_pdl_lc();
    ggml_cuda_pdl_sync();

    float part[nwarps];
#pragma unroll
    for (int w = 0; w < nwarps; ++w) {
        const int tid = w * WARP_SIZE + lane;
        if constexpr (std::is_same_v<type_acc, float>) {
            float sumf = 0.0f;
#pragma unroll
            for (int it = 0; it < niter; ++it) {
                const int col2 = tid + it * block_size;
                if (col2 < ncols2) {
                    const float2 tmpx = __half22float2(xv[w][it]);
                    const float2 tmpy = y[col2];
                    ggml_cuda_mad(sumf, tmpx.x, tmpy.x);
                    ggml_cuda_mad(sumf, tmpx.y, tmpy.y);
                }
            }
            part[w] = sumf;
        } else {
#ifdef FP16_AVAILABLE
            half2 sumh2 = { 0.0f, 0.0f };
#pragma unroll
            for (int it = 0; it < niter; ++it) {
                const int col2 = tid + it * block_size;
                if (col2 < ncols2) {
                    const half2 tmpx = xv[w][it];
                    const float2 tmpy = y[col2];
                    sumh2 += tmpx * make_half2(tmpy.x, tmpy.y);
                }
            }
            part[w] = __low2float(sumh2) + __high2float(sumh2);
#else
            NO_DEVICE_CODE;
#endif  // FP16_AVAILABLE
        }
    }
#pragma unroll
    for (int w = 0; w < nwarps; ++w) {
        part[w] = warp_reduce_sum<WARP_SIZE>(part[w]);
    }
    float value = part[0];
    if constexpr (nwarps > 1) {
        value = 0.0f;
#pragma unroll
        for (int w = 0; w < nwarps; ++w) {
            if (lane == w) {
                value = part[w];
            }
        }
        value = warp_reduce_sum<WARP_SIZE>(value);
    }
    if (lane == 0) {
        if constexpr (has_bias) {
            value += bias[row];
        }
        dst[row] = value;
    }
}

// One q8_0 row of `nblocks` blocks (at most `max_blocks`) times the column, as ggml's
// mul_mat_vec_q with `nwarps` warps does it (ncols_dst 1) after quantize_q8_1 made the
// column's blocks. Lane l of a warp plays thread l of each of ggml's warps in turn: blocks
// 8w + l/4, 8w + l/4 + 8 nwarps, ..., ints 2 (l % 4) and the next; the warps' sums added
// in order, then reduced by butterfly. The row's weights are read first, before the wait
// for the kernels this one depends on (they do not write weights). Then every thread block
// quantizes the whole column into shared memory as quantize_q8_1 does (a warp a block of
// 32: the largest magnitude, its scale, each value rounded; the block sum quantize_q8_1
// also stores is not read by a q8_0 product).
template <int nwarps, int max_blocks, bool has_bias>
__global__ void __launch_bounds__(rows_per_block * WARP_SIZE)
    mat_vec_q8_0(const void * x, const int64_t stride_row, const float * y, const float * bias,
                 float * dst, const int nblocks, const int nrows) {
    constexpr int vdr = VDR_Q8_0_Q8_1_MMVQ;
    constexpr int qi_per_thread = QI8_0 / vdr;  // threads on one block
    constexpr int blocks_per_iter = vdr * nwarps * WARP_SIZE / QI8_0;
    constexpr int iters = (max_blocks + blocks_per_iter - 1) / blocks_per_iter;
    constexpr int quantized_per_warp = (max_blocks + rows_per_block - 1) / rows_per_block;
    extern __shared__ char mat_vec_shared[];
    block_q8_1 * yq = (block_q8_1 *) mat_vec_shared;
    const int lane = threadIdx.x;
    const int row = blockIdx.x * rows_per_block + threadIdx.y;
    const bool has_row = row < nrows;
    const int kqs = vdr * (lane % qi_per_thread);
    const block_q8_0 * xrow = (const block_q8_0 *) x + (has_row ? row : 0) * stride_row;

    int v[nwarps][iters][vdr];
    float d8_0[nwarps][iters];
#pragma unroll
    for (int w = 0; w < nwarps; ++w) {
#pragma unroll
        for (int it = 0; it < iters; ++it) {
            const int kbx = (w * WARP_SIZE + lane) / qi_per_thread + it * blocks_per_iter;
            if (has_row && kbx < nblocks) {
#pragma unroll
                for (int i = 0; i < vdr; ++i) {
                    v[w][it][i] = get_int_b2(xrow[kbx].qs, kqs + i);
                }
                d8_0[w][it] = xrow[kbx].d;
            }
        }
    }

    ggml_cuda_pdl_lc();
    ggml_cuda_pdl_sync();
    float xs[quantized_per_warp];
#pragma unroll
    for (int j = 0; j < quantized_per_warp; ++j) {
        const int kb = threadIdx.y + j * rows_per_block;
        xs[j] = kb < nblocks ? y[kb * QK8_1 + lane] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < quantized_per_warp; ++j) {
        const int kb = threadIdx.y + j * rows_per_block;
        if (kb < nblocks) {
            const float xi = xs[j];
            float amax = fabsf(xi);
            amax = warp_reduce_max<QK8_1>(amax);
            const float d = amax / 127.0f;
            const int8_t q = amax == 0.0f ? 0 : roundf(xi / d);
            yq[kb].qs[lane] = q;
            if (lane == 0) {
                yq[kb].ds = make_half2(d, 0.0f);
            }
        }
    }
    __syncthreads();
    if (!has_row) {
        return;
    }

    float tmp[nwarps];
#pragma unroll
    for (int w = 0; w < nwarps; ++w) {
        tmp[w] = 0.0f;
#pragma unroll
        for (int it = 0; it < iters; ++it) {
            const int kbx = (w * WARP_SIZE + lane) / qi_per_thread + it * blocks_per_iter;
            if (kbx < nblocks) {
                const block_q8_1 * bq8_1 = &yq[kbx];
                int u[vdr];
#pragma unroll
                for (int i = 0; i < vdr; ++i) {
                    u[i] = get_int_b4(bq8_1->qs, kqs + i);
                }
                // vecdotq.cuh's vec_dot_q8_0_q8_1, with the weights read above.
                tmp[w] += vec_dot_q8_0_q8_1_impl<float, vdr>(v[w][it], u, d8_0[w][it],
                                                             __low2half(bq8_1->ds));
            }
        }
    }
    float value = tmp[0];
#pragma unroll
    for (int w = 1; w < nwarps; ++w) {
        value += tmp[w];
    }
    value = warp_reduce_sum<WARP_SIZE>(value);
    if (lane == 0) {
        if constexpr (has_bias) {
            value += bias[row];
        }
        dst[row] = value;
    }
}

// ggml's block size for mul_mat_vec_f over `ncols` (launch_mul_mat_vec_f_cuda): the
// fewest iterations, the smallest block among equals, up to 256 threads.
static int mmvf_block_size(int64_t ncols) {
    int64_t best = WARP_SIZE;
    int64_t niter_best = (ncols + 2 * WARP_SIZE - 1) / (2 * WARP_SIZE);
    for (int64_t block_size = 2 * WARP_SIZE; block_size <= 256; block_size += WARP_SIZE) {
        const int64_t niter = (ncols + 2 * block_size - 1) / (2 * block_size);
        if (niter < niter_best) {
            niter_best = niter;
            best = block_size;
        }
    }
    return (int) best;
}

// The warps of ggml's mul_mat_vec_q block for q8_0 and one column on device `cc`
// (mmvq.cu's calc_nwarps by its parameter table); 0 where that depends on more than the
// device (DGX Spark may double it), which leaves the product to ggml.
static int mmvq_q8_0_warps(int cc) {
    if (GGML_CUDA_CC_IS_RDNA4(cc) || GGML_CUDA_CC_IS_RDNA3_0(cc)) {
        return 8;
    }
    if (GGML_CUDA_CC_IS_RDNA2(cc) || GGML_CUDA_CC_IS_RDNA3_5(cc)) {
        return 1;
    }
    if (GGML_CUDA_CC_IS_AMD(cc)) {
        return GGML_CUDA_CC_IS_GCN(cc) || GGML_CUDA_CC_IS_CDNA(cc) ? 2 : 4;
    }
    if (GGML_CUDA_CC_IS_NVIDIA(cc) && ggml_cuda_highest_compiled_arch(cc) == GGML_CUDA_CC_DGX_SPARK) {
        return 0;
    }
    return GGML_CUDA_CC_IS_NVIDIA(cc) ? 4 : 0;
}

struct Product {
    const ggml_tensor * w;
    const ggml_tensor * x;
    const ggml_tensor * bias;  // or null
    ggml_tensor * out;         // the product's node, or the bias add's
};

template <typename type_acc, int block_size, int niter>
void launch_f16(const Product & p, cudaStream_t stream) {
    const int64_t nrows = p.w->ne[1];
    const ggml_cuda_kernel_launch_params params(
        dim3((unsigned) ((nrows + rows_per_block - 1) / rows_per_block)),
        dim3(WARP_SIZE, rows_per_block), 0, stream);
    const half2 * x = (const half2 *) p.w->data;
    const int64_t stride_row2 = p.w->nb[1] / sizeof(half2);
    const float2 * y = (const float2 *) p.x->data;
    const int ncols2 = (int) (p.w->ne[0] / 2);
    float * dst = (float *) p.out->data;
    if (p.bias != nullptr) {
        ggml_cuda_kernel_launch(mat_vec_f16<type_acc, block_size, niter, true>, params, x, stride_row2, y,
                                (const float *) p.bias->data, dst, ncols2, (int) nrows);
    } else {
        ggml_cuda_kernel_launch(mat_vec_f16<type_acc, block_size, niter, false>, params, x, stride_row2, y,
                                (const float *) nullptr, dst, ncols2, (int) nrows);
    }
}

template <typename type_acc, int block_size>
bool dispatch_niter(const Product & p, int niter, cudaStream_t stream) {
    switch (niter) {
        case 1: launch_f16<type_acc, block_size, 1>(p, stream); return true;
        case 2: launch_f16<type_acc, block_size, 2>(p, stream); return true;
        case 3: launch_f16<type_acc, block_size, 3>(p, stream); return true;
        case 4: launch_f16<type_acc, block_size, 4>(p, stream); return true;
        default: return false;
    }
}

template <typename type_acc>
bool dispatch_block(const Product & p, int block_size, int niter, cudaStream_t stream) {
    switch (block_size) {
        case 32: return dispatch_niter<type_acc, 32>(p, niter, stream);
        case 64: return dispatch_niter<type_acc, 64>(p, niter, stream);
        case 96: return dispatch_niter<type_acc, 96>(p, niter, stream);
        case 128: return dispatch_niter<type_acc, 128>(p, niter, stream);
        case 160: return dispatch_niter<type_acc, 160>(p, niter, stream);
        case 192: return dispatch_niter<type_acc, 192>(p, niter, stream);
        case 224: return dispatch_niter<type_acc, 224>(p, niter, stream);
        case 256: return dispatch_niter<type_acc, 256>(p, niter, stream);
        default: return false;
    }
}

// Runs an f16 product as ggml_cuda_mul_mat would run it through mul_mat_vec_f; false
// (nothing launched) for a shape the kernel is not made for.
static bool run_f16(const Product & p, int cc, cudaStream_t stream) {
    const ggml_tensor * w = p.w;
    if (!ggml_cuda_should_use_mmvf(w->type, cc, WARP_SIZE, w->ne, w->nb, 1) || w->ne[0] % 2 != 0 ||
        w->nb[1] % sizeof(half2) != 0 || (uintptr_t) w->data % sizeof(half2) != 0 ||
        (uintptr_t) p.x->data % sizeof(float2) != 0) {
        return false;
    }
    const int block_size = mmvf_block_size(w->ne[0]);
    const int64_t niter = (w->ne[0] + 2 * block_size - 1) / (2 * block_size);
    // mmvf.cu: half sums where the GPU has fast f16 and the product asks no more (the
    // caller takes only products that ask the default precision).
    const ggml_prec prec = fast_fp16_available(cc) ? GGML_PREC_DEFAULT : GGML_PREC_F32;
    if (niter > 4) {
        return false;
    }
    return prec == GGML_PREC_DEFAULT ? dispatch_block<half>(p, block_size, (int) niter, stream)
                                     : dispatch_block<float>(p, block_size, (int) niter, stream);
}

template <int nwarps, int max_blocks>
void launch_q8_0(const Product & p, cudaStream_t stream) {
    const int64_t nrows = p.w->ne[1];
    const int nblocks = (int) (p.w->ne[0] / QK8_0);
    const ggml_cuda_kernel_launch_params params(
        dim3((unsigned) ((nrows + rows_per_block - 1) / rows_per_block)),
        dim3(WARP_SIZE, rows_per_block), nblocks * sizeof(block_q8_1), stream);
    const int64_t stride_row = p.w->nb[1] / sizeof(block_q8_0);
    const float * y = (const float *) p.x->data;
    float * dst = (float *) p.out->data;
    if (p.bias != nullptr) {
        ggml_cuda_kernel_launch(mat_vec_q8_0<nwarps, max_blocks, true>, params, p.w->data, stride_row, y,
                                (const float *) p.bias->data, dst, nblocks, (int) nrows);
    } else {
        ggml_cuda_kernel_launch(mat_vec_q8_0<nwarps, max_blocks, false>, params, p.w->data, stride_row, y,
                                (const float *) nullptr, dst, nblocks, (int) nrows);
    }
}

// The kernel for rows of `nblocks` blocks: the row's weights are held in registers.
template <int nwarps>
bool dispatch_blocks(const Product & p, int64_t nblocks, cudaStream_t stream) {
    if (nblocks <= 16) {
        launch_q8_0<nwarps, 16>(p, stream);
    } else if (nblocks <= 64) {
        launch_q8_0<nwarps, 64>(p, stream);
    } else if (nblocks <= 128) {
        launch_q8_0<nwarps, 128>(p, stream);
    } else {
        return false;
    }
    return true;
}

// Runs a q8_0 product as ggml_cuda_mul_mat would run it through quantize_q8_1 and
// mul_mat_vec_q; false (nothing launched) where ggml would take another kernel or the
// shape is not one the kernel is made for.
static bool run_q8_0(const Product & p, int cc, cudaStream_t stream) {
    const ggml_tensor * w = p.w;
    const int nwarps = mmvq_q8_0_warps(cc);
    // Rows of up to 4,096 values: their weights in registers, the column's blocks in
    // shared memory (4.6 KB).
    if (ggml_cuda_should_use_mmvf(w->type, cc, WARP_SIZE, w->ne, w->nb, 1) ||
        ggml_cuda_should_use_mmf(w->type, cc, WARP_SIZE, w->ne, w->nb, 1, false) ||
        !ggml_cuda_should_use_mmvq(w->type, cc, 1) || w->ne[0] % QK8_0 != 0 || w->ne[0] > 4096 ||
        w->nb[1] % sizeof(block_q8_0) != 0 || w->nb[0] != sizeof(block_q8_0)) {
        return false;
    }
    const int64_t nblocks = w->ne[0] / QK8_0;
    switch (nwarps) {
        case 1: return dispatch_blocks<1>(p, nblocks, stream);
        case 2: return dispatch_blocks<2>(p, nblocks, stream);
        case 4: return dispatch_blocks<4>(p, nblocks, stream);
        case 8: return dispatch_blocks<8>(p, nblocks, stream);
        default: return false;
    }
}

}  // namespace

// A MUL_MAT of a weight matrix with one f32 column (f16 or q8_0 weights, one matrix, no
// broadcast), and the bias ADD after it when there is one: runs them and returns how many
// nodes that was (0: left to ggml).
int audiocpp_mat_vec(ggml_backend_cuda_context & ctx, const ggml_cgraph * cgraph, int i, bool f16,
                     bool q8_0) {
    ggml_tensor * mm = cgraph->nodes[i];
    if (mm->op != GGML_OP_MUL_MAT) {
        return 0;
    }
    const ggml_tensor * w = mm->src[0];
    const ggml_tensor * x = mm->src[1];
    if (!((f16 && w->type == GGML_TYPE_F16) || (q8_0 && w->type == GGML_TYPE_Q8_0))) {
        return 0;
    }
    const int device = ggml_cuda_get_device();
    const int cc = ggml_cuda_info().devices[device].cc;
    // As ggml_cuda_mul_mat decides: its other routes first (a Hadamard product, a weight
    // in a compute buffer whose padding it would clear). A product that asks for f32
    // precision is left to ggml: fused with its bias add, ggml reads the precision from
    // the add instead.
    const bool bad_padding_clear =
        ggml_backend_buffer_get_usage(w->buffer) == GGML_BACKEND_BUFFER_USAGE_COMPUTE &&
        ggml_nbytes(w) != ggml_backend_buffer_get_alloc_size(w->buffer, w) && w->view_src;
    if (ggml_cuda_info().devices[device].warp_size != WARP_SIZE || ggml_cuda_op_mul_mat_use_fwht(mm) ||
        bad_padding_clear || x->type != GGML_TYPE_F32 || mm->type != GGML_TYPE_F32 ||
        x->nb[0] != sizeof(float) || x->ne[0] != w->ne[0] || x->ne[1] != 1 || x->ne[2] != 1 ||
        x->ne[3] != 1 || w->ne[2] != 1 || w->ne[3] != 1 || !is_f32_rows(mm) || mm->ne[1] != 1 ||
        w->ne[1] > INT32_MAX || overlap(mm, w) || overlap(mm, x) ||
        ggml_prec(mm->op_params[0]) != GGML_PREC_DEFAULT) {
        return 0;
    }
    Product p = { w, x, nullptr, mm };
    // The bias add ggml would fuse: [rows] f32, the product used by nothing else, its sum
    // written where no block reads (every block reads the whole column).
    const int outputs[] = { i + 1 };
    static const ggml_op with_bias[] = { GGML_OP_MUL_MAT, GGML_OP_ADD };
    if (ggml_can_fuse_subgraph(cgraph, i, 2, with_bias, outputs, 1)) {
        ggml_tensor * add = cgraph->nodes[i + 1];
        const ggml_tensor * bias = other_src(add, mm);
        if (bias != nullptr && is_f32_rows(bias) && ggml_are_same_shape(bias, mm) && is_f32_rows(add) &&
            ggml_are_same_shape(add, mm) && !overlap(add, w) && !overlap(add, x) && !overlap(add, bias) &&
            !overlap(bias, mm)) {
            p.bias = bias;
            p.out = add;
        }
    }
    const bool ran = w->type == GGML_TYPE_F16 ? run_f16(p, cc, ctx.stream()) : run_q8_0(p, cc, ctx.stream());
    if (!ran) {
        return 0;
    }
    return p.bias != nullptr ? 2 : 1;
}
