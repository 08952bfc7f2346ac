# The one edit of ggml's source that the kernels need: ggml's graph evaluation (in
# ggml-cuda/ggml-cuda.cu) offers each node to audiocpp_run_nodes (../fusion.cu) before
# its own fusions, and skips the nodes that ran. audiocpp_fusion_patch(IN OUT) writes IN
# with that call and its declaration added to OUT, and stops CMake with a message when IN
# has not exactly one place for each (a llama.cpp version this was not written for). Run
# alone: cmake -DIN=... -DOUT=... -P this file.
set(AUDIOCPP_FUSION_DECLARE_BEFORE
    "static int ggml_cuda_try_fuse(ggml_backend_cuda_context * cuda_ctx, ggml_cgraph * cgraph, int i) {")
set(AUDIOCPP_FUSION_CALL_BEFORE "int nodes_to_skip = ggml_cuda_try_fuse(cuda_ctx, cgraph, i);")

function(audiocpp_fusion_patch in out)
    file(READ "${in}" text)
    foreach (anchor IN ITEMS "${AUDIOCPP_FUSION_DECLARE_BEFORE}" "${AUDIOCPP_FUSION_CALL_BEFORE}")
        string(FIND "${text}" "${anchor}" first)
        string(FIND "${text}" "${anchor}" last REVERSE)
        if (first EQUAL -1 OR NOT first EQUAL last)
            message(FATAL_ERROR "audiocpp fusion: ${in} has no single place for the line before "
                "'${anchor}' that ggml_fusion/cmake/patch.cmake adds; update the patch for this llama.cpp")
        endif()
    endforeach()
    string(REPLACE "${AUDIOCPP_FUSION_DECLARE_BEFORE}"
        "int audiocpp_run_nodes(ggml_backend_cuda_context & ctx, ggml_cgraph * cgraph, int i); // audiocpp\n${AUDIOCPP_FUSION_DECLARE_BEFORE}"
        text "${text}")
    # The call takes the indentation of the line it goes before.
    string(REGEX MATCH "\n([ \t]*)int nodes_to_skip = ggml_cuda_try_fuse" _ "${text}")
    set(indent "${CMAKE_MATCH_1}")
    string(REPLACE "${indent}${AUDIOCPP_FUSION_CALL_BEFORE}"
        "${indent}if (const int audiocpp_ran = audiocpp_run_nodes(*cuda_ctx, cgraph, i)) { i += audiocpp_ran - 1; continue; } // audiocpp\n${indent}${AUDIOCPP_FUSION_CALL_BEFORE}"
        text "${text}")
    # Written only when it changes, so a second configure rebuilds nothing.
    file(WRITE "${out}.new" "${text}")
    configure_file("${out}.new" "${out}" COPYONLY)
    file(REMOVE "${out}.new")
endfunction()

if (CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
    audiocpp_fusion_patch("${IN}" "${OUT}")
endif()
