#!/bin/bash
# Builds ggml's HIP backend with audiocpp_gemm wired in (inside a ROCm SDK, e.g. the Debian
# sid chroot of `cargo xtask sdk debian --suite sid`) and shows from the ELF that it links
# hipBLASLt and neither hipBLAS nor rocBLAS. No GPU is needed.
#
# usage: hip_link_check.sh GGML_SOURCE BUILD_DIR [GPU_TARGET] [extra cmake -D options...]
set -euo pipefail
ggml_source=$1
build=$2
target=${3:-gfx1103}
shift $(( $# > 3 ? 3 : $# ))
here=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DAUDIOCPP_GEMM_VENDOR=HIP -DAUDIOCPP_GEMM_GGML_SOURCE="$ggml_source" \
        -DGGML_HIP=ON -DGPU_TARGETS="$target" -DGGML_BACKEND_DL=ON -DBUILD_SHARED_LIBS=ON \
        -DGGML_CPU=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DGGML_HIP_NO_VMM=ON -DGGML_HIP_GRAPHS=OFF \
        -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$build/bin" -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$build/bin" "$@"
fi
cmake --build "$build" --target ggml-hip

lib="$build/bin/libggml-hip.so"
echo "== NEEDED of libggml-hip.so"
readelf -d "$lib" | grep NEEDED
echo "== undefined hipBLAS/rocBLAS/hipBLASLt symbols of libggml-hip.so"
nm -D --undefined-only "$lib" | grep -i -E 'hipblas|rocblas' || true
echo "== offload targets"
readelf -S "$lib" | grep -i hip_fatbin || true
needed=$(readelf -d "$lib" | grep NEEDED)
if echo "$needed" | grep -q -E 'libhipblas\.so|librocblas\.so'; then
    echo "FAIL: libggml-hip.so still needs hipBLAS or rocBLAS" >&2
    exit 1
fi
if ! echo "$needed" | grep -q 'libhipblaslt\.so'; then
    echo "FAIL: libggml-hip.so does not link hipBLASLt" >&2
    exit 1
fi
echo "OK: libggml-hip.so links hipBLASLt, not hipBLAS/rocBLAS"
