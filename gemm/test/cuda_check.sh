#!/bin/bash
# Builds ggml's CUDA backend with audiocpp_gemm wired in (the same CMake route the HIP build
# takes), runs the product test against ggml's CPU backend, and prints the ELF evidence.
# Runs on a machine with nvcc, CMake, Ninja and an NVIDIA GPU.
#
# usage: cuda_check.sh GGML_SOURCE BUILD_DIR [CUDA_ARCH]
#   GGML_SOURCE: the ggml/ folder of the pinned llama.cpp tree (llama-cpp-sys-2 0.1.161)
set -euo pipefail
ggml_source=$1
build=$2
arch=${3:-90}
here=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DAUDIOCPP_GEMM_VENDOR=CUDA -DAUDIOCPP_GEMM_GGML_SOURCE="$ggml_source" -DAUDIOCPP_GEMM_TESTS=ON \
        -DGGML_CUDA=ON -DGGML_BACKEND_DL=ON -DBUILD_SHARED_LIBS=ON -DGGML_CPU=ON -DGGML_NATIVE=OFF \
        -DGGML_CUDA_GRAPHS=OFF -DCMAKE_CUDA_ARCHITECTURES="$arch" \
        -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$build/bin" -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$build/bin"
fi
cmake --build "$build" -j"$(nproc)" --target ggml-cuda ggml-cpu audiocpp_gemm_ggml_test

echo "== NEEDED of libggml-cuda.so"
readelf -d "$build/bin/libggml-cuda.so" | grep NEEDED
echo "== undefined BLAS symbols of libggml-cuda.so"
nm -D --undefined-only "$build/bin/libggml-cuda.so" | grep -i -E 'cublas|hipblas|rocblas' || true
if readelf -d "$build/bin/libggml-cuda.so" | grep NEEDED | grep -q 'libcublas\.so'; then
    echo "FAIL: libggml-cuda.so still needs cuBLAS" >&2
    exit 1
fi

echo "== products vs CPU"
"$build/bin/audiocpp_gemm_ggml_test" "$build/bin"
