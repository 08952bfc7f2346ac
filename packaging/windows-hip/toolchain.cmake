# CMake toolchain for the Windows x64 HIP cross-build (xtask/src/winhip/): clang-22 of the
# Debian chroot compiles C, C++ and HIP for x86_64-w64-windows-gnu against the MinGW-w64
# files of the chroot (one MinGW toolchain for every Windows part of the package), links
# with lld, and finds HIP, hipBLAS, rocBLAS and hipBLASLt only through the Windows-host
# package configs beside this file (never Debian's Linux ones). Paths are inside the chroot.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR AMD64)

set(CMAKE_C_COMPILER /usr/bin/clang-22)
set(CMAKE_CXX_COMPILER /usr/bin/clang++-22)
set(CMAKE_C_COMPILER_TARGET x86_64-w64-windows-gnu)
set(CMAKE_CXX_COMPILER_TARGET x86_64-w64-windows-gnu)
set(CMAKE_RC_COMPILER /usr/bin/x86_64-w64-mingw32-windres)
set(CMAKE_AR /usr/bin/llvm-ar-22)
set(CMAKE_RANLIB /usr/bin/llvm-ranlib-22)

# Only the MinGW files: the default sysroot /usr would put glibc's and the Linux HIP
# headers on the include path (fix 3 of the fake Windows ROCm root).
set(CMAKE_SYSROOT /opt/winhip/mingw-sysroot)

set(CMAKE_EXE_LINKER_FLAGS_INIT "-fuse-ld=lld")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-fuse-ld=lld")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "-fuse-ld=lld")
# libstdc++ of the posix-thread MinGW needs winpthread; gcc's posix driver adds it by
# itself, clang does not (ggml-hip.dll then misses pthread_mutex_*).
set(CMAKE_C_STANDARD_LIBRARIES "-lpthread" CACHE STRING "winpthread for the posix-thread runtime" FORCE)
set(CMAKE_CXX_STANDARD_LIBRARIES "-lpthread" CACHE STRING "winpthread for the posix-thread runtime" FORCE)

# find_package(hip|hipblas|rocblas|hipblaslt) must land on the Windows-host configs.
set(hip_DIR /opt/winhip/cmake/hip CACHE PATH "Windows-host HIP config" FORCE)
set(hipblas_DIR /opt/winhip/cmake/hipblas CACHE PATH "Windows-host hipBLAS config" FORCE)
set(rocblas_DIR /opt/winhip/cmake/rocblas CACHE PATH "Windows-host rocBLAS config" FORCE)
set(hipblaslt_DIR /opt/winhip/cmake/hipblaslt CACHE PATH "Windows-host hipBLASLt config" FORCE)
set(CMAKE_FIND_ROOT_PATH /opt/winhip/rocm)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
