# rocblas for a Windows (MinGW) host: headers only. ggml-hip's CMake asks for it, but with the
# hipBLASLt route (gemm/) nothing calls it: no import library is given, so a BLAS call the
# redirect does not map fails the link instead of importing a DLL the package lacks.
set(rocblas_FOUND TRUE)
if (NOT TARGET roc::rocblas)
    add_library(roc::rocblas INTERFACE IMPORTED)
    set_target_properties(roc::rocblas PROPERTIES INTERFACE_INCLUDE_DIRECTORIES /opt/winhip/rocm/include)
endif()
