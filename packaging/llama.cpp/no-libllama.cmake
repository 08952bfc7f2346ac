# Builds libllama from one empty file. The engine uses only ggml (no llama_* function is
# called), yet llama-cpp-sys-2 builds and installs all of llama.cpp, and libllama's ~190
# C++ files are about 110 s of every build on two cores: the test build, each package and
# the portable-CPU test. The linker takes nothing from the static libllama either way, so
# the binaries are the same with and without this file.
#
# packaging/llama.cpp/hooks.cmake includes this file, and .cargo/config.toml names that one
# in CMAKE_PROJECT_INCLUDE, which the binding forwards to CMake; CMake runs it after every
# project() call. For llama.cpp's top-level project it
# defers a call to the end of that directory, when the `llama` target and its install rule
# exist, and replaces the target's sources: the target, its install rule and the libraries
# the binding links stay as they are.
if (NOT PROJECT_NAME STREQUAL "llama.cpp" OR NOT CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
    return()
endif()

function(audiocpp_empty_libllama)
    if (NOT TARGET llama)
        message(FATAL_ERROR "audiocpp: llama.cpp made no `llama` target to empty")
    endif()
    set(empty "${CMAKE_BINARY_DIR}/audiocpp-empty-libllama.cpp")
    file(WRITE "${empty}" "// libllama without llama.cpp's sources: packaging/llama.cpp/no-libllama.cmake\n")
    set_property(TARGET llama PROPERTY SOURCES "${empty}")
    set_property(TARGET llama PROPERTY UNITY_BUILD OFF)
    message(STATUS "audiocpp: libllama is built empty (the engine calls only ggml)")
endfunction()

cmake_language(DEFER CALL audiocpp_empty_libllama)
