# Adds the kernels of ggml_fusion/ to ggml's CUDA or HIP backend (README.md there). Run at
# the end of every project() call (packaging/llama.cpp/hooks.cmake, CMAKE_PROJECT_INCLUDE);
# for ggml's project it defers a call to the end of ggml's folder, when the backend's
# target exists, and there swaps ggml-cuda.cu for a copy with one added call and adds
# the kernels' sources, compiled as the target compiles its other sources.
if (NOT PROJECT_NAME STREQUAL "ggml")
    return()
endif()
include(${CMAKE_CURRENT_LIST_DIR}/patch.cmake)

function(audiocpp_fusion_wire fusion_dir)
    foreach (target ggml-cuda ggml-hip)
        if (NOT TARGET ${target})
            continue()
        endif()
        get_target_property(sources ${target} SOURCES)
        set(original "")
        foreach (s IN LISTS sources)
            if (s MATCHES "(^|/)ggml-cuda/ggml-cuda\\.cu$")
                set(original "${s}")
            endif()
        endforeach()
        if (original STREQUAL "")
            message(FATAL_ERROR "audiocpp fusion: ${target} has no ggml-cuda/ggml-cuda.cu among its sources")
        endif()
        set(patched "${CMAKE_BINARY_DIR}/audiocpp_fusion/${target}/ggml-cuda.cu")
        audiocpp_fusion_patch("${original}" "${patched}")
        set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${original}")
        set(added "${patched}")
        foreach (kernel fusion layer_norm mat_vec)
            list(APPEND added "${fusion_dir}/${kernel}.cu")
        endforeach()
        list(REMOVE_ITEM sources "${original}")
        set_property(TARGET ${target} PROPERTY SOURCES ${sources} ${added})
        # ggml-hip chooses its sources' language (HIP, or CXX when the compiler is hipcc)
        # and flags per file; the added ones take the original's.
        foreach (property LANGUAGE COMPILE_FLAGS)
            get_source_file_property(value "${original}" TARGET_DIRECTORY ${target} ${property})
            if (value)
                set_source_files_properties(${added} TARGET_DIRECTORY ${target}
                    PROPERTIES ${property} "${value}")
            endif()
        endforeach()
        message(STATUS "audiocpp fusion: ${target} runs layer norms and matrix-vector products with ggml_fusion/")
    endforeach()
endfunction()

# A deferred call's arguments are read when it runs: the folder is kept in a variable of
# ggml's directory until then.
get_filename_component(_audiocpp_fusion_dir "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
cmake_language(DEFER CALL audiocpp_fusion_wire "${_audiocpp_fusion_dir}")
