# Builds ggml's sapphirerapids CPU variant without its AMX kernels, for dynamic-backends
# builds with Debian 12's MinGW-w64 (xtask/src/build/plan.rs names this file in
# CMAKE_PROJECT_ggml_INCLUDE for such builds). That binutils (2.40) cannot assemble the AMX
# tile loads of ggml-cpu/amx/mmq.cpp for a PE target ("not a valid base/index expression"),
# and ggml builds every CPU variant once its backends are plugins.
#
# CMake runs this file at the end of ggml's project() call; the deferred call below runs
# once ggml's tree is configured and appends -mno-amx-* to that one variant's flags, after
# ggml's own -mamx-*: the compiler then defines no __AMX_INT8__ and ggml compiles its AMX
# code out (amx/amx.h, amx/mmq.cpp). The variant keeps every other feature it is built with
# (AVX-512 VBMI, VNNI and BF16), so an AMX machine runs it at that level.
function(audiocpp_sapphirerapids_without_amx)
    if (NOT TARGET ggml-cpu-sapphirerapids)
        message(FATAL_ERROR "audiocpp: ggml made no ggml-cpu-sapphirerapids target to build without AMX")
    endif()
    target_compile_options(ggml-cpu-sapphirerapids PRIVATE -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
    message(STATUS "audiocpp: ggml-cpu-sapphirerapids is built without AMX code (MinGW-w64 binutils 2.40)")
endfunction()

cmake_language(DEFER CALL audiocpp_sapphirerapids_without_amx)
