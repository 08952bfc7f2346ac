// What the kernels of ggml_fusion/ share: the entry point each one offers ggml's graph
// evaluation (fusion.cu asks them in turn), and the checks on ggml's tensors they all make.
#pragma once

#include "ggml-cuda/common.cuh"
#include "ggml-impl.h"

// What ggml's graph evaluation calls first for node i (fusion.cu): how many nodes from i
// one of our kernels ran; 0 leaves them to ggml.
int audiocpp_run_nodes(ggml_backend_cuda_context & ctx, ggml_cgraph * cgraph, int i);

// Each runs nodes i.. of `cgraph` when they are a chain it takes and returns how many
// nodes it ran; 0 leaves them to ggml.
int audiocpp_layer_norm(ggml_backend_cuda_context & ctx, const ggml_cgraph * cgraph, int i);
int audiocpp_mat_vec(ggml_backend_cuda_context & ctx, const ggml_cgraph * cgraph, int i, bool f16,
                     bool q8_0);

namespace audiocpp {

inline bool is_f32_rows(const ggml_tensor * t) {
    return t->type == GGML_TYPE_F32 && ggml_is_contiguous(t);
}

// Whether the bytes of x and y meet. A kernel whose blocks each read all they need before
// writing may write over an operand it is given as its output, but over no other.
inline bool overlap(const ggml_tensor * x, const ggml_tensor * y) {
    const char * x0 = (const char *) x->data;
    const char * y0 = (const char *) y->data;
    return x0 < y0 + ggml_nbytes(y) && y0 < x0 + ggml_nbytes(x);
}

// The operand of `node` that is not `prev`, or null when `prev` is neither.
inline const ggml_tensor * other_src(const ggml_tensor * node, const ggml_tensor * prev) {
    if (node->src[0] == prev) {
        return node->src[1];
    }
    if (node->src[1] == prev) {
        return node->src[0];
    }
    return nullptr;
}

}  // namespace audiocpp
