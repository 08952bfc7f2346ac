// The thin macro layer: the names audiocpp_gemm.cu uses for the GPU runtime and the Lt
// library, mapped to HIP + hipBLASLt (AUDIOCPP_GEMM_HIP) or CUDA + cuBLASLt (the default),
// the same way ggml's vendors/hip.h maps CUDA names to HIP. The two Lt APIs have the same
// shape (descriptors, layouts, preference, heuristic, matmul); only the names differ.
#pragma once

#if defined(AUDIOCPP_GEMM_HIP)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>
#include <hipblaslt/hipblaslt.h>

#define agError_t hipError_t
#define agSuccess hipSuccess
#define agStream_t hipStream_t
#define agMalloc hipMalloc
#define agFree hipFree
#define agMemcpyAsync hipMemcpyAsync
#define agMemcpyDeviceToHost hipMemcpyDeviceToHost
#define agStreamSynchronize hipStreamSynchronize
#define agStreamIsCapturing hipStreamIsCapturing
#define agStreamCaptureStatus hipStreamCaptureStatus
#define agStreamCaptureStatusNone hipStreamCaptureStatusNone
#define agGetLastError hipGetLastError
typedef __half ag_half;
typedef __hip_bfloat16 ag_bf16;

#define agLtHandle_t hipblasLtHandle_t
#define agLtStatus_t hipblasStatus_t
#define AG_LT_SUCCESS HIPBLAS_STATUS_SUCCESS
#define agLtCreate hipblasLtCreate
#define agLtDestroy hipblasLtDestroy
#define agLtMatmulDesc_t hipblasLtMatmulDesc_t
#define agLtMatmulDescCreate hipblasLtMatmulDescCreate
#define agLtMatmulDescDestroy hipblasLtMatmulDescDestroy
#define agLtMatmulDescSetAttribute hipblasLtMatmulDescSetAttribute
#define AG_LT_DESC_TRANSA HIPBLASLT_MATMUL_DESC_TRANSA
#define AG_LT_DESC_TRANSB HIPBLASLT_MATMUL_DESC_TRANSB
#define agLtMatrixLayout_t hipblasLtMatrixLayout_t
#define agLtMatrixLayoutCreate hipblasLtMatrixLayoutCreate
#define agLtMatrixLayoutDestroy hipblasLtMatrixLayoutDestroy
#define agLtMatrixLayoutSetAttribute hipblasLtMatrixLayoutSetAttribute
#define AG_LT_LAYOUT_BATCH_COUNT HIPBLASLT_MATRIX_LAYOUT_BATCH_COUNT
#define AG_LT_LAYOUT_STRIDED_BATCH_OFFSET HIPBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET
#define agLtMatmulPreference_t hipblasLtMatmulPreference_t
#define agLtMatmulPreferenceCreate hipblasLtMatmulPreferenceCreate
#define agLtMatmulPreferenceDestroy hipblasLtMatmulPreferenceDestroy
#define agLtMatmulPreferenceSetAttribute hipblasLtMatmulPreferenceSetAttribute
#define AG_LT_PREF_MAX_WORKSPACE_BYTES HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
// hipBLASLt has no minimum-alignment preferences.
#define AG_LT_HAS_ALIGNMENT_PREFS 0
#define agLtMatmulHeuristicResult_t hipblasLtMatmulHeuristicResult_t
#define agLtMatmulAlgoGetHeuristic hipblasLtMatmulAlgoGetHeuristic
#define agLtMatmulAlgo_t hipblasLtMatmulAlgo_t
#define agLtMatmul hipblasLtMatmul
#define agLtOperation_t hipblasOperation_t
#define AG_LT_OP_N HIPBLAS_OP_N
#define AG_LT_OP_T HIPBLAS_OP_T
#define agLtComputeType_t hipblasComputeType_t
#define AG_LT_COMPUTE_32F HIPBLAS_COMPUTE_32F
#define agLtDataType_t hipDataType
#define AG_LT_R_32F HIP_R_32F
#define AG_LT_R_16F HIP_R_16F
#define AG_LT_R_16BF HIP_R_16BF
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cublasLt.h>

#define agError_t cudaError_t
#define agSuccess cudaSuccess
#define agStream_t cudaStream_t
#define agMalloc cudaMalloc
#define agFree cudaFree
#define agMemcpyAsync cudaMemcpyAsync
#define agMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define agStreamSynchronize cudaStreamSynchronize
#define agStreamIsCapturing cudaStreamIsCapturing
#define agStreamCaptureStatus cudaStreamCaptureStatus
#define agStreamCaptureStatusNone cudaStreamCaptureStatusNone
#define agGetLastError cudaGetLastError
typedef __half ag_half;
typedef __nv_bfloat16 ag_bf16;

#define agLtHandle_t cublasLtHandle_t
#define agLtStatus_t cublasStatus_t
#define AG_LT_SUCCESS CUBLAS_STATUS_SUCCESS
#define agLtCreate cublasLtCreate
#define agLtDestroy cublasLtDestroy
#define agLtMatmulDesc_t cublasLtMatmulDesc_t
#define agLtMatmulDescCreate cublasLtMatmulDescCreate
#define agLtMatmulDescDestroy cublasLtMatmulDescDestroy
#define agLtMatmulDescSetAttribute cublasLtMatmulDescSetAttribute
#define AG_LT_DESC_TRANSA CUBLASLT_MATMUL_DESC_TRANSA
#define AG_LT_DESC_TRANSB CUBLASLT_MATMUL_DESC_TRANSB
#define agLtMatrixLayout_t cublasLtMatrixLayout_t
#define agLtMatrixLayoutCreate cublasLtMatrixLayoutCreate
#define agLtMatrixLayoutDestroy cublasLtMatrixLayoutDestroy
#define agLtMatrixLayoutSetAttribute cublasLtMatrixLayoutSetAttribute
#define AG_LT_LAYOUT_BATCH_COUNT CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT
#define AG_LT_LAYOUT_STRIDED_BATCH_OFFSET CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET
#define agLtMatmulPreference_t cublasLtMatmulPreference_t
#define agLtMatmulPreferenceCreate cublasLtMatmulPreferenceCreate
#define agLtMatmulPreferenceDestroy cublasLtMatmulPreferenceDestroy
#define agLtMatmulPreferenceSetAttribute cublasLtMatmulPreferenceSetAttribute
#define AG_LT_PREF_MAX_WORKSPACE_BYTES CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
// cuBLASLt assumes 256-byte aligned operands unless told otherwise.
#define AG_LT_HAS_ALIGNMENT_PREFS 1
#define AG_LT_PREF_MIN_ALIGNMENT_A CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES
#define AG_LT_PREF_MIN_ALIGNMENT_B CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES
#define AG_LT_PREF_MIN_ALIGNMENT_C CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES
#define AG_LT_PREF_MIN_ALIGNMENT_D CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
#define agLtMatmulHeuristicResult_t cublasLtMatmulHeuristicResult_t
#define agLtMatmulAlgoGetHeuristic cublasLtMatmulAlgoGetHeuristic
#define agLtMatmulAlgo_t cublasLtMatmulAlgo_t
#define agLtMatmul cublasLtMatmul
#define agLtOperation_t cublasOperation_t
#define AG_LT_OP_N CUBLAS_OP_N
#define AG_LT_OP_T CUBLAS_OP_T
#define agLtComputeType_t cublasComputeType_t
#define AG_LT_COMPUTE_32F CUBLAS_COMPUTE_32F
#define agLtDataType_t cudaDataType_t
#define AG_LT_R_32F CUDA_R_32F
#define AG_LT_R_16F CUDA_R_16F
#define AG_LT_R_16BF CUDA_R_16BF
#endif
