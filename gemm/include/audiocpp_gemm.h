// audiocpp_gemm: the matrix products ggml's CUDA/HIP backend asks of cuBLAS/hipBLAS, done
// through cuBLASLt/hipBLASLt instead (issue 15). Vendor-neutral C API: the enums below are
// ours; audiocpp_gemm_redirect.h translates the vendor's values at ggml's call sites.
//
// Every entry point returns AUDIOCPP_GEMM_OK unless its arguments are invalid: a product the
// Lt library refuses (no algorithm, an error from the call) is done by a plain kernel of
// this library instead, because ggml aborts the process on any BLAS error.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define AUDIOCPP_GEMM_API
#else
#define AUDIOCPP_GEMM_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/// One library context: the Lt handle, the stream, the workspace and the algorithm cache.
typedef struct audiocpp_gemm_context *audiocpp_gemm_handle;

/// What an entry point reports (mapped back to the vendor's status by the redirect).
typedef enum {
    AUDIOCPP_GEMM_OK = 0,
    AUDIOCPP_GEMM_INVALID_VALUE = 1,
    AUDIOCPP_GEMM_NOT_SUPPORTED = 2,
    AUDIOCPP_GEMM_ALLOC_FAILED = 3,
    AUDIOCPP_GEMM_EXECUTION_FAILED = 4,
} audiocpp_gemm_status;

/// Column-major operand transposition, as in BLAS.
typedef enum {
    AUDIOCPP_GEMM_OP_N = 0,
    AUDIOCPP_GEMM_OP_T = 1,
    AUDIOCPP_GEMM_OP_UNSUPPORTED = -1,
} audiocpp_gemm_op;

/// Element types of A, B and C.
typedef enum {
    AUDIOCPP_GEMM_F32 = 0,
    AUDIOCPP_GEMM_F16 = 1,
    AUDIOCPP_GEMM_BF16 = 2,
    AUDIOCPP_GEMM_TYPE_UNSUPPORTED = -1,
} audiocpp_gemm_type;

/// What the caller asked to compute in. The library always accumulates in f32 (the gfx11
/// hipBLASLt kernels do); COMPUTE_16F only says that alpha and beta point to halves.
typedef enum {
    AUDIOCPP_GEMM_COMPUTE_32F = 0,
    AUDIOCPP_GEMM_COMPUTE_16F = 1,
    AUDIOCPP_GEMM_COMPUTE_UNSUPPORTED = -1,
} audiocpp_gemm_compute;

/// Triangular-solve side and triangle (only what ggml's solve_tri asks: right side, op N).
typedef enum { AUDIOCPP_GEMM_SIDE_LEFT = 0, AUDIOCPP_GEMM_SIDE_RIGHT = 1 } audiocpp_gemm_side;
typedef enum { AUDIOCPP_GEMM_UPPER = 0, AUDIOCPP_GEMM_LOWER = 1 } audiocpp_gemm_fill;
typedef enum { AUDIOCPP_GEMM_NON_UNIT = 0, AUDIOCPP_GEMM_UNIT = 1 } audiocpp_gemm_diag;

/// Call counters, per entry point and per route taken (tests assert them).
typedef enum {
    AUDIOCPP_GEMM_CALL_SGEMM = 0,
    AUDIOCPP_GEMM_CALL_GEMM_EX,
    AUDIOCPP_GEMM_CALL_GEMM_STRIDED_BATCHED_EX,
    AUDIOCPP_GEMM_CALL_GEMM_BATCHED_EX,
    AUDIOCPP_GEMM_CALL_SGEMM_STRIDED_BATCHED,
    AUDIOCPP_GEMM_CALL_SGEMM_BATCHED,
    AUDIOCPP_GEMM_CALL_STRSM_BATCHED,
    /// Lt matmul launches (one per strided product or per regular run of a pointer array).
    AUDIOCPP_GEMM_ROUTE_LT,
    /// Pointer-array products read back and split into regular runs.
    AUDIOCPP_GEMM_ROUTE_ARRAY_READBACK,
    /// Products done by the library's own GEMM kernel (Lt refused, forced, or graph capture).
    AUDIOCPP_GEMM_ROUTE_FALLBACK_KERNEL,
    /// Triangular solves done by the library's own kernel.
    AUDIOCPP_GEMM_ROUTE_TRSM_KERNEL,
    AUDIOCPP_GEMM_COUNTER_COUNT
} audiocpp_gemm_counter;

AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_create(audiocpp_gemm_handle *out);
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_destroy(audiocpp_gemm_handle h);
/// `stream` is a cudaStream_t / hipStream_t.
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_set_stream(audiocpp_gemm_handle h, void *stream);
/// A caller-owned device workspace replacing the library's own (ggml's CUDA path sets one).
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_set_workspace(audiocpp_gemm_handle h, void *ptr,
                                                                   size_t bytes);
AUDIOCPP_GEMM_API const char *audiocpp_gemm_status_string(audiocpp_gemm_status s);

/// cublasSgemm.
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_sgemm(audiocpp_gemm_handle h, audiocpp_gemm_op op_a,
                                                           audiocpp_gemm_op op_b, int m, int n, int k,
                                                           const float *alpha, const float *a, int lda,
                                                           const float *b, int ldb, const float *beta, float *c,
                                                           int ldc);
/// cublasGemmEx.
AUDIOCPP_GEMM_API audiocpp_gemm_status
audiocpp_gemm_gemm_ex(audiocpp_gemm_handle h, audiocpp_gemm_op op_a, audiocpp_gemm_op op_b, int m, int n, int k,
                      const void *alpha, const void *a, audiocpp_gemm_type type_a, int lda, const void *b,
                      audiocpp_gemm_type type_b, int ldb, const void *beta, void *c, audiocpp_gemm_type type_c,
                      int ldc, audiocpp_gemm_compute compute);
/// cublasGemmStridedBatchedEx (strides in elements).
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_gemm_strided_batched_ex(
    audiocpp_gemm_handle h, audiocpp_gemm_op op_a, audiocpp_gemm_op op_b, int m, int n, int k, const void *alpha,
    const void *a, audiocpp_gemm_type type_a, int lda, long long stride_a, const void *b, audiocpp_gemm_type type_b,
    int ldb, long long stride_b, const void *beta, void *c, audiocpp_gemm_type type_c, int ldc, long long stride_c,
    int batch, audiocpp_gemm_compute compute);
/// cublasGemmBatchedEx: the pointer arrays live in device memory.
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_gemm_batched_ex(
    audiocpp_gemm_handle h, audiocpp_gemm_op op_a, audiocpp_gemm_op op_b, int m, int n, int k, const void *alpha,
    const void *const *a, audiocpp_gemm_type type_a, int lda, const void *const *b, audiocpp_gemm_type type_b,
    int ldb, const void *beta, void *const *c, audiocpp_gemm_type type_c, int ldc, int batch,
    audiocpp_gemm_compute compute);
/// cublasSgemmStridedBatched.
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_sgemm_strided_batched(
    audiocpp_gemm_handle h, audiocpp_gemm_op op_a, audiocpp_gemm_op op_b, int m, int n, int k, const float *alpha,
    const float *a, int lda, long long stride_a, const float *b, int ldb, long long stride_b, const float *beta,
    float *c, int ldc, long long stride_c, int batch);
/// cublasSgemmBatched: the pointer arrays live in device memory.
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_sgemm_batched(audiocpp_gemm_handle h, audiocpp_gemm_op op_a,
                                                                   audiocpp_gemm_op op_b, int m, int n, int k,
                                                                   const float *alpha, const float *const *a,
                                                                   int lda, const float *const *b, int ldb,
                                                                   const float *beta, float *const *c, int ldc,
                                                                   int batch);
/// cublasStrsmBatched: X * op(A) = alpha * B in place of B, right side and op N only (what
/// ggml's solve_tri asks); no Lt library has a triangular solve, so a kernel of ours does it.
AUDIOCPP_GEMM_API audiocpp_gemm_status audiocpp_gemm_strsm_batched(audiocpp_gemm_handle h, audiocpp_gemm_side side,
                                                                   audiocpp_gemm_fill fill, audiocpp_gemm_op op,
                                                                   audiocpp_gemm_diag diag, int m, int n,
                                                                   const float *alpha, const float *const *a,
                                                                   int lda, float *const *b, int ldb, int batch);

/// Copies the process-wide counters (AUDIOCPP_GEMM_COUNTER_COUNT values) into `out`.
AUDIOCPP_GEMM_API void audiocpp_gemm_counters(unsigned long long *out);
/// Tests only: 1 sends every product to the library's own kernel (also set by the
/// environment variable AUDIOCPP_GEMM_FORCE_FALLBACK=1 at the first create).
AUDIOCPP_GEMM_API void audiocpp_gemm_force_fallback(int on);

#ifdef __cplusplus
}
#endif
