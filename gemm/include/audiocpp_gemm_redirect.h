// Force-included (-include) into every CUDA/HIP source of ggml's backend, before ggml's own
// vendors/{cuda,hip}.h: it includes the vendor's BLAS header first, then renames the BLAS
// entry points ggml calls to audiocpp_gemm's, translating the vendor's enum values at the
// call site. ggml's source stays untouched.
//
// CUDA: ggml calls cublasXxx directly, so the cublas names are redefined here.
// HIP:  ggml's vendors/hip.h maps cublasXxx -> hipblasXxx, so the hipblas names are
//       redefined here and the preprocessor follows both steps.
#pragma once

#if defined(__HIP__) || defined(__HIPCC__) || defined(GGML_USE_HIP)
#define AUDIOCPP_GEMM_REDIRECT_HIP 1
// ggml's vendors/hip.h sets this before including the HIP runtime; it must hold from the
// first include on, which is now this one.
#ifndef HIP_DISABLE_WARP_SYNC_BUILTINS
#define HIP_DISABLE_WARP_SYNC_BUILTINS 1
#endif
#include <hip/hip_runtime.h>
#include <hipblas/hipblas.h>
#elif defined(__CUDACC__)
#define AUDIOCPP_GEMM_REDIRECT_CUDA 1
#include <cuda_runtime.h>
#include <cublas_v2.h>
#endif

#if defined(AUDIOCPP_GEMM_REDIRECT_HIP) || defined(AUDIOCPP_GEMM_REDIRECT_CUDA)

#include "audiocpp_gemm.h"

#if defined(AUDIOCPP_GEMM_REDIRECT_HIP)
typedef hipblasStatus_t audiocpp_gemm_vendor_status_t;
typedef hipblasOperation_t audiocpp_gemm_vendor_op_t;
#if HIP_VERSION >= 60500000
// The same switch as ggml's vendors/hip.h: ROCm >= 6.5 passes hipDataType and
// hipblasComputeType_t, older ones hipblasDatatype_t for both.
typedef hipDataType audiocpp_gemm_vendor_type_t;
typedef hipblasComputeType_t audiocpp_gemm_vendor_compute_t;
#define AUDIOCPP_GEMM_V_R_32F HIP_R_32F
#define AUDIOCPP_GEMM_V_R_16F HIP_R_16F
#define AUDIOCPP_GEMM_V_R_16BF HIP_R_16BF
#define AUDIOCPP_GEMM_V_COMPUTE_16F HIPBLAS_COMPUTE_16F
#else
typedef hipblasDatatype_t audiocpp_gemm_vendor_type_t;
typedef hipblasDatatype_t audiocpp_gemm_vendor_compute_t;
#define AUDIOCPP_GEMM_V_R_32F HIPBLAS_R_32F
#define AUDIOCPP_GEMM_V_R_16F HIPBLAS_R_16F
#define AUDIOCPP_GEMM_V_R_16BF HIPBLAS_R_16B
#define AUDIOCPP_GEMM_V_COMPUTE_16F HIPBLAS_R_16F
#endif
#define AUDIOCPP_GEMM_V_OP_N HIPBLAS_OP_N
#define AUDIOCPP_GEMM_V_OP_T HIPBLAS_OP_T
#define AUDIOCPP_GEMM_V_SIDE_RIGHT HIPBLAS_SIDE_RIGHT
#define AUDIOCPP_GEMM_V_FILL_LOWER HIPBLAS_FILL_MODE_LOWER
#define AUDIOCPP_GEMM_V_DIAG_UNIT HIPBLAS_DIAG_UNIT
#define AUDIOCPP_GEMM_V_SUCCESS HIPBLAS_STATUS_SUCCESS
#define AUDIOCPP_GEMM_V_INVALID_VALUE HIPBLAS_STATUS_INVALID_VALUE
#define AUDIOCPP_GEMM_V_NOT_SUPPORTED HIPBLAS_STATUS_NOT_SUPPORTED
#define AUDIOCPP_GEMM_V_ALLOC_FAILED HIPBLAS_STATUS_ALLOC_FAILED
#define AUDIOCPP_GEMM_V_EXECUTION_FAILED HIPBLAS_STATUS_EXECUTION_FAILED
typedef hipblasSideMode_t audiocpp_gemm_vendor_side_t;
typedef hipblasFillMode_t audiocpp_gemm_vendor_fill_t;
typedef hipblasDiagType_t audiocpp_gemm_vendor_diag_t;
#else
typedef cublasStatus_t audiocpp_gemm_vendor_status_t;
typedef cublasOperation_t audiocpp_gemm_vendor_op_t;
typedef cudaDataType_t audiocpp_gemm_vendor_type_t;
typedef cublasComputeType_t audiocpp_gemm_vendor_compute_t;
#define AUDIOCPP_GEMM_V_R_32F CUDA_R_32F
#define AUDIOCPP_GEMM_V_R_16F CUDA_R_16F
#define AUDIOCPP_GEMM_V_R_16BF CUDA_R_16BF
#define AUDIOCPP_GEMM_V_COMPUTE_16F CUBLAS_COMPUTE_16F
#define AUDIOCPP_GEMM_V_OP_N CUBLAS_OP_N
#define AUDIOCPP_GEMM_V_OP_T CUBLAS_OP_T
#define AUDIOCPP_GEMM_V_SIDE_RIGHT CUBLAS_SIDE_RIGHT
#define AUDIOCPP_GEMM_V_FILL_LOWER CUBLAS_FILL_MODE_LOWER
#define AUDIOCPP_GEMM_V_DIAG_UNIT CUBLAS_DIAG_UNIT
#define AUDIOCPP_GEMM_V_SUCCESS CUBLAS_STATUS_SUCCESS
#define AUDIOCPP_GEMM_V_INVALID_VALUE CUBLAS_STATUS_INVALID_VALUE
#define AUDIOCPP_GEMM_V_NOT_SUPPORTED CUBLAS_STATUS_NOT_SUPPORTED
#define AUDIOCPP_GEMM_V_ALLOC_FAILED CUBLAS_STATUS_ALLOC_FAILED
#define AUDIOCPP_GEMM_V_EXECUTION_FAILED CUBLAS_STATUS_EXECUTION_FAILED
typedef cublasSideMode_t audiocpp_gemm_vendor_side_t;
typedef cublasFillMode_t audiocpp_gemm_vendor_fill_t;
typedef cublasDiagType_t audiocpp_gemm_vendor_diag_t;
#endif

static inline audiocpp_gemm_op audiocpp_gemm_from_vendor_op(audiocpp_gemm_vendor_op_t op) {
    return op == AUDIOCPP_GEMM_V_OP_N   ? AUDIOCPP_GEMM_OP_N
           : op == AUDIOCPP_GEMM_V_OP_T ? AUDIOCPP_GEMM_OP_T
                                        : AUDIOCPP_GEMM_OP_UNSUPPORTED;
}

static inline audiocpp_gemm_type audiocpp_gemm_from_vendor_type(audiocpp_gemm_vendor_type_t t) {
    return t == AUDIOCPP_GEMM_V_R_32F    ? AUDIOCPP_GEMM_F32
           : t == AUDIOCPP_GEMM_V_R_16F  ? AUDIOCPP_GEMM_F16
           : t == AUDIOCPP_GEMM_V_R_16BF ? AUDIOCPP_GEMM_BF16
                                         : AUDIOCPP_GEMM_TYPE_UNSUPPORTED;
}

// Every 32-bit compute type (plain, "fast" variants) means f32 accumulation here; only a
// 16-bit one changes something: alpha and beta are halves.
static inline audiocpp_gemm_compute audiocpp_gemm_from_vendor_compute(audiocpp_gemm_vendor_compute_t c) {
    return c == AUDIOCPP_GEMM_V_COMPUTE_16F ? AUDIOCPP_GEMM_COMPUTE_16F : AUDIOCPP_GEMM_COMPUTE_32F;
}

static inline audiocpp_gemm_vendor_status_t audiocpp_gemm_to_vendor_status(audiocpp_gemm_status s) {
    switch (s) {
    case AUDIOCPP_GEMM_OK: return AUDIOCPP_GEMM_V_SUCCESS;
    case AUDIOCPP_GEMM_INVALID_VALUE: return AUDIOCPP_GEMM_V_INVALID_VALUE;
    case AUDIOCPP_GEMM_NOT_SUPPORTED: return AUDIOCPP_GEMM_V_NOT_SUPPORTED;
    case AUDIOCPP_GEMM_ALLOC_FAILED: return AUDIOCPP_GEMM_V_ALLOC_FAILED;
    default: return AUDIOCPP_GEMM_V_EXECUTION_FAILED;
    }
}

static inline const char *audiocpp_gemm_vendor_status_string(audiocpp_gemm_vendor_status_t s) {
    return s == AUDIOCPP_GEMM_V_SUCCESS           ? "AUDIOCPP_GEMM_OK"
           : s == AUDIOCPP_GEMM_V_INVALID_VALUE   ? "AUDIOCPP_GEMM_INVALID_VALUE"
           : s == AUDIOCPP_GEMM_V_NOT_SUPPORTED   ? "AUDIOCPP_GEMM_NOT_SUPPORTED"
           : s == AUDIOCPP_GEMM_V_ALLOC_FAILED    ? "AUDIOCPP_GEMM_ALLOC_FAILED"
                                                  : "AUDIOCPP_GEMM_EXECUTION_FAILED";
}

#define AUDIOCPP_GEMM_S(call) audiocpp_gemm_to_vendor_status(call)
#define AUDIOCPP_GEMM_OP(x) audiocpp_gemm_from_vendor_op(x)
#define AUDIOCPP_GEMM_TY(x) audiocpp_gemm_from_vendor_type(x)
#define AUDIOCPP_GEMM_CT(x) audiocpp_gemm_from_vendor_compute(x)

#define AUDIOCPP_GEMM_REDIRECT_CREATE(h) AUDIOCPP_GEMM_S(audiocpp_gemm_create(h))
#define AUDIOCPP_GEMM_REDIRECT_DESTROY(h) AUDIOCPP_GEMM_S(audiocpp_gemm_destroy(h))
#define AUDIOCPP_GEMM_REDIRECT_SET_STREAM(h, s) AUDIOCPP_GEMM_S(audiocpp_gemm_set_stream((h), (void *)(s)))
#define AUDIOCPP_GEMM_REDIRECT_SGEMM(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc)                        \
    AUDIOCPP_GEMM_S(audiocpp_gemm_sgemm((h), AUDIOCPP_GEMM_OP(ta), AUDIOCPP_GEMM_OP(tb), (m), (n), (k), (al), (A), \
                                        (lda), (B), (ldb), (be), (C), (ldc)))
#define AUDIOCPP_GEMM_REDIRECT_GEMM_EX(h, ta, tb, m, n, k, al, A, tA, lda, B, tB, ldb, be, C, tC, ldc, ct, algo)   \
    AUDIOCPP_GEMM_S(audiocpp_gemm_gemm_ex((h), AUDIOCPP_GEMM_OP(ta), AUDIOCPP_GEMM_OP(tb), (m), (n), (k), (al), (A), \
                                          AUDIOCPP_GEMM_TY(tA), (lda), (B), AUDIOCPP_GEMM_TY(tB), (ldb), (be), (C),  \
                                          AUDIOCPP_GEMM_TY(tC), (ldc), AUDIOCPP_GEMM_CT(ct)))
#define AUDIOCPP_GEMM_REDIRECT_GEMM_SB_EX(h, ta, tb, m, n, k, al, A, tA, lda, sA, B, tB, ldb, sB, be, C, tC, ldc, sC, \
                                          bc, ct, algo)                                                              \
    AUDIOCPP_GEMM_S(audiocpp_gemm_gemm_strided_batched_ex(                                                           \
        (h), AUDIOCPP_GEMM_OP(ta), AUDIOCPP_GEMM_OP(tb), (m), (n), (k), (al), (A), AUDIOCPP_GEMM_TY(tA), (lda), (sA),  \
        (B), AUDIOCPP_GEMM_TY(tB), (ldb), (sB), (be), (C), AUDIOCPP_GEMM_TY(tC), (ldc), (sC), (bc),                  \
        AUDIOCPP_GEMM_CT(ct)))
#define AUDIOCPP_GEMM_REDIRECT_GEMM_B_EX(h, ta, tb, m, n, k, al, A, tA, lda, B, tB, ldb, be, C, tC, ldc, bc, ct, algo) \
    AUDIOCPP_GEMM_S(audiocpp_gemm_gemm_batched_ex(                                                                    \
        (h), AUDIOCPP_GEMM_OP(ta), AUDIOCPP_GEMM_OP(tb), (m), (n), (k), (al), (const void *const *)(A),               \
        AUDIOCPP_GEMM_TY(tA), (lda), (const void *const *)(B), AUDIOCPP_GEMM_TY(tB), (ldb), (be),                     \
        (void *const *)(C), AUDIOCPP_GEMM_TY(tC), (ldc), (bc), AUDIOCPP_GEMM_CT(ct)))
#define AUDIOCPP_GEMM_REDIRECT_SGEMM_SB(h, ta, tb, m, n, k, al, A, lda, sA, B, ldb, sB, be, C, ldc, sC, bc)            \
    AUDIOCPP_GEMM_S(audiocpp_gemm_sgemm_strided_batched((h), AUDIOCPP_GEMM_OP(ta), AUDIOCPP_GEMM_OP(tb), (m), (n), (k), \
                                                        (al), (A), (lda), (sA), (B), (ldb), (sB), (be), (C), (ldc),   \
                                                        (sC), (bc)))
#define AUDIOCPP_GEMM_REDIRECT_SGEMM_B(h, ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc, bc)                         \
    AUDIOCPP_GEMM_S(audiocpp_gemm_sgemm_batched((h), AUDIOCPP_GEMM_OP(ta), AUDIOCPP_GEMM_OP(tb), (m), (n), (k), (al),  \
                                                (const float *const *)(A), (lda), (const float *const *)(B), (ldb),   \
                                                (be), (float *const *)(C), (ldc), (bc)))
#define AUDIOCPP_GEMM_REDIRECT_STRSM_B(h, side, fill, op, diag, m, n, al, A, lda, B, ldb, bc)                         \
    AUDIOCPP_GEMM_S(audiocpp_gemm_strsm_batched(                                                                     \
        (h), (side) == AUDIOCPP_GEMM_V_SIDE_RIGHT ? AUDIOCPP_GEMM_SIDE_RIGHT : AUDIOCPP_GEMM_SIDE_LEFT,               \
        (fill) == AUDIOCPP_GEMM_V_FILL_LOWER ? AUDIOCPP_GEMM_LOWER : AUDIOCPP_GEMM_UPPER, AUDIOCPP_GEMM_OP(op),       \
        (diag) == AUDIOCPP_GEMM_V_DIAG_UNIT ? AUDIOCPP_GEMM_UNIT : AUDIOCPP_GEMM_NON_UNIT, (m), (n), (al),           \
        (const float *const *)(A), (lda), (float *const *)(B), (ldb), (bc)))

#if defined(AUDIOCPP_GEMM_REDIRECT_HIP)
#define hipblasHandle_t audiocpp_gemm_handle
#define hipblasCreate AUDIOCPP_GEMM_REDIRECT_CREATE
#define hipblasDestroy AUDIOCPP_GEMM_REDIRECT_DESTROY
#define hipblasSetStream AUDIOCPP_GEMM_REDIRECT_SET_STREAM
#undef hipblasGemmEx
#undef hipblasGemmBatchedEx
#undef hipblasGemmStridedBatchedEx
#define hipblasSgemm AUDIOCPP_GEMM_REDIRECT_SGEMM
#define hipblasGemmEx AUDIOCPP_GEMM_REDIRECT_GEMM_EX
#define hipblasGemmStridedBatchedEx AUDIOCPP_GEMM_REDIRECT_GEMM_SB_EX
#define hipblasGemmBatchedEx AUDIOCPP_GEMM_REDIRECT_GEMM_B_EX
#define hipblasSgemmStridedBatched AUDIOCPP_GEMM_REDIRECT_SGEMM_SB
#define hipblasSgemmBatched AUDIOCPP_GEMM_REDIRECT_SGEMM_B
#define hipblasStrsmBatched AUDIOCPP_GEMM_REDIRECT_STRSM_B
#define hipblasStatusToString audiocpp_gemm_vendor_status_string
#else
// cublas_v2.h defines several of these names as macros for their _v2 symbols.
#undef cublasCreate
#undef cublasDestroy
#undef cublasSetStream
#undef cublasSetWorkspace
#undef cublasSetMathMode
#undef cublasSgemm
#undef cublasGemmEx
#undef cublasGemmStridedBatchedEx
#undef cublasGemmBatchedEx
#undef cublasSgemmStridedBatched
#undef cublasSgemmBatched
#undef cublasStrsmBatched
#undef cublasGetStatusString
#define cublasHandle_t audiocpp_gemm_handle
#define cublasCreate AUDIOCPP_GEMM_REDIRECT_CREATE
#define cublasDestroy AUDIOCPP_GEMM_REDIRECT_DESTROY
#define cublasSetStream AUDIOCPP_GEMM_REDIRECT_SET_STREAM
#define cublasSetWorkspace(h, ptr, bytes) AUDIOCPP_GEMM_S(audiocpp_gemm_set_workspace((h), (ptr), (bytes)))
// The library never uses TF32: every product is plain f32 accumulation.
#define cublasSetMathMode(h, mode) ((void)(h), (void)(mode), CUBLAS_STATUS_SUCCESS)
#define cublasSgemm AUDIOCPP_GEMM_REDIRECT_SGEMM
#define cublasGemmEx AUDIOCPP_GEMM_REDIRECT_GEMM_EX
#define cublasGemmStridedBatchedEx AUDIOCPP_GEMM_REDIRECT_GEMM_SB_EX
#define cublasGemmBatchedEx AUDIOCPP_GEMM_REDIRECT_GEMM_B_EX
#define cublasSgemmStridedBatched AUDIOCPP_GEMM_REDIRECT_SGEMM_SB
#define cublasSgemmBatched AUDIOCPP_GEMM_REDIRECT_SGEMM_B
#define cublasStrsmBatched AUDIOCPP_GEMM_REDIRECT_STRSM_B
#define cublasGetStatusString audiocpp_gemm_vendor_status_string
#endif

#endif
