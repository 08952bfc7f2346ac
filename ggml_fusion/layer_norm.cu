// One kernel for the layer norm chain ggml's CUDA/HIP backend runs as three or four:
// [add ->] norm -> mul (gain) -> add (bias). Whisper's decoder step is bound by the
// launches of its small kernels, and each layer norm was three of them (README.md).
// The kernel does the unfused chain's arithmetic in its order, each product and sum
// rounded on its own, so its output has the bits of the unfused kernels'.

#include "fusion.cuh"

using audiocpp::is_f32_rows;
using audiocpp::other_src;
using audiocpp::overlap;

namespace {

// Columns a thread holds in registers: the row is read once, all its loads in flight at
// once, and written once (a loop that stores between loads waits for each load in turn,
// since the stores may alias them). A warp holds any row shorter than 1024 (ggml's
// block size below that); 1024 threads hold 4096 columns in the registers each may
// have. Longer rows are left to ggml.
__host__ __device__ constexpr int per_thread(int block_size) {
    return block_size <= 32 ? 32 : 4;
}

// Rows of `ncols` floats, one block each. With `residual`, x = a + b is written to `sum`
// and normalised; without it, x = a. out = norm(x) * gain + bias, gain and bias one row
// shared by all. `sum` and `out` may be `a` or `b` themselves (ggml runs ops in place):
// a block reads its whole row before the first write (the reduction waits for all its
// threads), and reads no other row.
template <int block_size, bool residual>
__global__ void __launch_bounds__(block_size) layer_norm_f32(const float * a, const float * b, float * sum,
                               const float * gain, const float * bias, float * out,
                               const int ncols, const float eps) {
    const int64_t row = blockIdx.x;
    const int tid = threadIdx.x;
    a += row * ncols;
    out += row * ncols;
    if constexpr (residual) {
        b += row * ncols;
        sum += row * ncols;
    }

    constexpr int max_per_thread = per_thread(block_size);
    float x[max_per_thread];
    float g[max_per_thread];
    float c[max_per_thread];
    // The next kernel may start; it waits for this one's writes before it reads.
    ggml_cuda_pdl_lc();
    ggml_cuda_pdl_sync();
#pragma unroll
    for (int k = 0; k < max_per_thread; ++k) {
        const int col = tid + k * block_size;
        if (col < ncols) {
            x[k] = residual ? __fadd_rn(a[col], b[col]) : a[col];
            g[k] = gain[col];
            c[k] = bias[col];
        }
    }
    // ggml's norm_f32 in its order: each thread's columns, then the block's threads.
    float2 mean_var = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < max_per_thread; ++k) {
        if (tid + k * block_size < ncols) {
            // The same expressions as ggml's, so the compiler contracts them alike.
            const float xi = x[k];
            mean_var.x += xi;
            mean_var.y += xi * xi;
        }
    }

    extern __shared__ float2 s_sum2[];
    mean_var = block_reduce<block_reduce_method::SUM, block_size>(mean_var, s_sum2);

    const float mean = mean_var.x / ncols;
    const float var = mean_var.y / ncols - mean * mean;
    const float inv_std = rsqrtf(var + eps);

#pragma unroll
    for (int k = 0; k < max_per_thread; ++k) {
        const int col = tid + k * block_size;
        if (col < ncols) {
            if constexpr (residual) {
                sum[col] = x[k];
            }
            const float n = (x[k] - mean) * inv_std;
            out[col] = __fadd_rn(__fmul_rn(n, g[k]), c[k]);
        }
    }
}

template <bool residual>
void launch(const float * a, const float * b, float * sum, const float * gain,
            const float * bias, float * out, int ncols, int64_t nrows, float eps,
            cudaStream_t stream) {
    // ggml's norm_f32_cuda's block sizes: the reduction order, and so the bits, follow.
    // Launched as ggml launches its kernels (programmatic dependent launch where the
    // GPU has it), so that the next one's start overlaps this one's end.
    if (ncols < 1024) {
        ggml_cuda_kernel_launch(layer_norm_f32<WARP_SIZE, residual>,
                                ggml_cuda_kernel_launch_params(dim3(nrows), dim3(WARP_SIZE), 0, stream),
                                a, b, sum, gain, bias, out, ncols, eps);
    } else {
        ggml_cuda_kernel_launch(layer_norm_f32<1024, residual>,
                                ggml_cuda_kernel_launch_params(dim3(nrows), dim3(1024),
                                                               (size_t) (32 * sizeof(float2)), stream),
                                a, b, sum, gain, bias, out, ncols, eps);
    }
}

// A gain or bias: one contiguous f32 row of `ncols`, broadcast over every row.
static bool is_row_vector(const ggml_tensor * t, int64_t ncols) {
    return is_f32_rows(t) && t->ne[0] == ncols && ggml_nrows(t) == 1;
}

}  // namespace

// Runs nodes i.. as one kernel when they are a layer norm chain it takes, and returns
// how many nodes that was (0: none, ggml goes on as before).
int audiocpp_layer_norm(ggml_backend_cuda_context & ctx, const ggml_cgraph * cgraph, int i) {
    const bool residual = cgraph->nodes[i]->op == GGML_OP_ADD;
    const int first_norm = residual ? i + 1 : i;
    const int count = residual ? 4 : 3;
    static const ggml_op with_add[] = { GGML_OP_ADD, GGML_OP_NORM, GGML_OP_MUL, GGML_OP_ADD };
    const ggml_op * ops = residual ? with_add : with_add + 1;
    const int outputs[] = { i, i + count - 1 };
    // Every node of the chain other than the outputs must be used only inside it.
    if (!ggml_can_fuse_subgraph(cgraph, i, count, ops, residual ? outputs : outputs + 1,
                                residual ? 2 : 1)) {
        return 0;
    }
    const ggml_tensor * norm = cgraph->nodes[first_norm];
    const ggml_tensor * mul = cgraph->nodes[first_norm + 1];
    ggml_tensor * out = cgraph->nodes[first_norm + 2];
    const ggml_tensor * x = norm->src[0];
    const ggml_tensor * gain = other_src(mul, norm);
    const ggml_tensor * bias = other_src(out, mul);
    const int64_t ncols = x->ne[0];
    if (gain == nullptr || bias == nullptr || !is_f32_rows(x) || !is_f32_rows(norm) ||
        !is_f32_rows(mul) || !is_f32_rows(out) || !ggml_are_same_shape(x, out) ||
        !ggml_are_same_shape(x, mul) || !is_row_vector(gain, ncols) ||
        !is_row_vector(bias, ncols) ||
        ncols > (ncols < 1024 ? WARP_SIZE * per_thread(WARP_SIZE) : 1024 * per_thread(1024))) {
        return 0;
    }
    float eps;
    memcpy(&eps, norm->op_params, sizeof(float));

    const ggml_tensor * a = x;
    const ggml_tensor * b = nullptr;
    if (residual) {
        const ggml_tensor * add = cgraph->nodes[i];
        if (x != add) {
            return 0;
        }
        a = add->src[0];
        b = add->src[1];
        if (!is_f32_rows(a) || !is_f32_rows(b) || !ggml_are_same_shape(a, add) ||
            !ggml_are_same_shape(b, add)) {
            return 0;
        }
    }
    // A block reads all of its row before it writes any, so an output may be an operand
    // itself (ggml's allocator reuses a dead operand's memory); any other overlap could
    // reach a row another block has still to read. Gain and bias are never written.
    const ggml_tensor * sum_t = residual ? x : nullptr;
    for (const ggml_tensor * dst : { sum_t, (const ggml_tensor *) out }) {
        for (const ggml_tensor * src : { a, b }) {
            if (dst != nullptr && src != nullptr && overlap(dst, src) && dst->data != src->data) {
                return 0;
            }
        }
        for (const ggml_tensor * src : { gain, bias }) {
            if (dst != nullptr && overlap(dst, src)) {
                return 0;
            }
        }
    }
    if (residual && overlap(out, x)) {
        return 0;
    }
    const float * bd = b != nullptr ? (const float *) b->data : nullptr;
    float * sum = residual ? (float *) x->data : nullptr;
    const int64_t nrows = ggml_nrows(x);
    if (residual) {
        launch<true>((const float *) a->data, bd, sum, (const float *) gain->data,
                     (const float *) bias->data, (float *) out->data, (int) ncols, nrows, eps,
                     ctx.stream());
    } else {
        launch<false>((const float *) a->data, bd, sum, (const float *) gain->data,
                      (const float *) bias->data, (float *) out->data, (int) ncols, nrows, eps,
                      ctx.stream());
    }
    return count;
}
