# What every CMake build of the pinned llama.cpp runs after each project() call: the
# binding's builds get it from .cargo/config.toml (CMAKE_PROJECT_INCLUDE, which the binding
# forwards to CMake), xtask's own CMake runs of ggml pass it, and so does the CUDA recipe of
# docs/build/CUDA.md. Each file acts on its own project only.
#   - no-libllama.cmake: libllama from one empty file (the engine calls only ggml).
#   - ggml_fusion/cmake/hook.cmake: our fused kernels in ggml's CUDA and HIP backends.
include(${CMAKE_CURRENT_LIST_DIR}/no-libllama.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/../../ggml_fusion/cmake/hook.cmake)
