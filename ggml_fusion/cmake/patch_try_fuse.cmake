# The one edit of ggml's source that the fused kernels need: ggml_cuda_try_fuse (in
# ggml-cuda/ggml-cuda.cu) first offers each node to audiocpp_fuse_layer_norm
# (../layer_norm.cu). audiocpp_fusion_patch(IN OUT) writes IN with that line added to OUT,
# and stops CMake with a message when IN has not exactly one place for it (a llama.cpp
# version this was not written for). Run alone: cmake -DIN=... -DOUT=... -P this file.
set(AUDIOCPP_FUSION_ANCHOR
    "static int ggml_cuda_try_fuse(ggml_backend_cuda_context * cuda_ctx, ggml_cgraph * cgraph, int i) {")

function(audiocpp_fusion_patch in out)
    file(READ "${in}" text)
    string(FIND "${text}" "${AUDIOCPP_FUSION_ANCHOR}" first)
    string(FIND "${text}" "${AUDIOCPP_FUSION_ANCHOR}" last REVERSE)
    if (first EQUAL -1 OR NOT first EQUAL last)
        message(FATAL_ERROR "audiocpp fusion: ${in} has no single ggml_cuda_try_fuse definition "
            "as ggml_fusion/cmake/patch_try_fuse.cmake expects; update the patch for this llama.cpp")
    endif()
    string(REPLACE "${AUDIOCPP_FUSION_ANCHOR}"
        "int audiocpp_fuse_layer_norm(ggml_backend_cuda_context & ctx, ggml_cgraph * cgraph, int i); // audiocpp\n${AUDIOCPP_FUSION_ANCHOR}\n    if (const int audiocpp_fused = audiocpp_fuse_layer_norm(*cuda_ctx, cgraph, i)) { return audiocpp_fused; } // audiocpp"
        text "${text}")
    # Written only when it changes, so a second configure rebuilds nothing.
    file(WRITE "${out}.new" "${text}")
    configure_file("${out}.new" "${out}" COPYONLY)
    file(REMOVE "${out}.new")
endfunction()

if (CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
    audiocpp_fusion_patch("${IN}" "${OUT}")
endif()
