# hipblas for a Windows (MinGW) host: headers only. ggml-hip's CMake asks for it, but with the
# hipBLASLt route (gemm/) nothing calls it: no import library is given, so a BLAS call the
# redirect does not map fails the link instead of importing a DLL the package lacks.
set(hipblas_FOUND TRUE)
if (NOT TARGET roc::hipblas)
    add_library(roc::hipblas INTERFACE IMPORTED)
    set_target_properties(roc::hipblas PROPERTIES INTERFACE_INCLUDE_DIRECTORIES /opt/winhip/rocm/include)
endif()
