# Wires audiocpp_gemm into ggml's CUDA or HIP backend without editing ggml: CMake runs this
# file at the end of ggml's project() call (CMAKE_PROJECT_ggml_INCLUDE), it adds the
# library, and once ggml's whole tree is configured (the deferred call below) it
#   - force-includes audiocpp_gemm_redirect.h into every source of the backend target,
#   - links the static library into it,
#   - and links with --as-needed, so the BLAS libraries ggml's own CMake still names
#     (cuBLAS; hipBLAS and rocBLAS) drop out of the backend's NEEDED list. (A PE import
#     table never lists a DLL nothing is imported from.)
set(_audiocpp_gemm_dir ${CMAKE_CURRENT_LIST_DIR}/..)

if (GGML_HIP)
    set(AUDIOCPP_GEMM_VENDOR HIP CACHE STRING "" FORCE)
    set(_audiocpp_gemm_target ggml-hip)
elseif (GGML_CUDA)
    set(AUDIOCPP_GEMM_VENDOR CUDA CACHE STRING "" FORCE)
    set(_audiocpp_gemm_target ggml-cuda)
else()
    message(STATUS "audiocpp_gemm: neither GGML_HIP nor GGML_CUDA is on; nothing to wire")
    return()
endif()

if (NOT AUDIOCPP_GEMM_HOOK_HAS_LIBRARY)
    add_subdirectory(${_audiocpp_gemm_dir} ${CMAKE_BINARY_DIR}/audiocpp_gemm)
endif()

function(audiocpp_gemm_wire target gemm_dir)
    if (NOT TARGET ${target})
        message(FATAL_ERROR "audiocpp_gemm: ggml made no ${target} target to wire the GEMM library into")
    endif()
    set(redirect ${gemm_dir}/include/audiocpp_gemm_redirect.h)
    # nvcc takes --pre-include=FILE; clang takes -include joined to FILE. ggml compiles its
    # HIP sources as HIP, or as CXX when the C++ compiler is hipcc (always on Windows).
    target_compile_options(${target} PRIVATE
        $<$<COMPILE_LANGUAGE:CUDA>:--pre-include=${redirect}>
        $<$<COMPILE_LANGUAGE:HIP>:-include${redirect}>)
    if (target STREQUAL "ggml-hip")
        target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-include${redirect}>)
    endif()
    target_include_directories(${target} PRIVATE ${gemm_dir}/include)
    target_link_libraries(${target} PRIVATE audiocpp_gemm)
    if (NOT WIN32)
        target_link_options(${target} PRIVATE -Wl,--as-needed)
    endif()
    message(STATUS "audiocpp_gemm: ${target} does its BLAS calls through audiocpp_gemm")

    if (AUDIOCPP_GEMM_TESTS)
        add_executable(audiocpp_gemm_ggml_test ${gemm_dir}/test/ggml_products.cpp)
        target_link_libraries(audiocpp_gemm_ggml_test PRIVATE ggml ggml-base ${CMAKE_DL_LIBS})
        target_compile_features(audiocpp_gemm_ggml_test PRIVATE cxx_std_17)
        target_include_directories(audiocpp_gemm_ggml_test PRIVATE ${gemm_dir}/include)
    endif()
endfunction()

cmake_language(DEFER
    CALL audiocpp_gemm_wire ${_audiocpp_gemm_target} ${_audiocpp_gemm_dir})
