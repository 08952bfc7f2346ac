# HIP for a Windows (MinGW) host, as the fake ROCm root of the cross-build provides it:
# headers and device libraries from /opt/winhip/rocm (the six fixes), the runtime through
# the import library made from the real amdhip64_7.dll. ggml-hip on WIN32 compiles its .cu
# files as C++ and takes the HIP flags from hip::device.
file(READ /opt/winhip/rocm/share/hip/version _hip_version_file)
string(REGEX MATCH "HIP_VERSION_MAJOR=([0-9]+)" _m "${_hip_version_file}")
set(_hip_major ${CMAKE_MATCH_1})
string(REGEX MATCH "HIP_VERSION_MINOR=([0-9]+)" _m "${_hip_version_file}")
set(_hip_minor ${CMAKE_MATCH_1})
string(REGEX MATCH "HIP_VERSION_PATCH=([0-9]+)" _m "${_hip_version_file}")
set(hip_VERSION "${_hip_major}.${_hip_minor}.${CMAKE_MATCH_1}")
set(hip_FOUND TRUE)

if (NOT GPU_TARGETS)
    message(FATAL_ERROR "winhip hip-config: GPU_TARGETS is empty; the build plan sets it from the track")
endif()
set(_hip_offload "")
foreach(_arch IN LISTS GPU_TARGETS)
    list(APPEND _hip_offload "--offload-arch=${_arch}")
endforeach()

if (NOT TARGET hip::host)
    add_library(hip::host INTERFACE IMPORTED)
    set_target_properties(hip::host PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES /opt/winhip/rocm/include
        INTERFACE_COMPILE_DEFINITIONS "__HIP_PLATFORM_AMD__=1"
        INTERFACE_LINK_LIBRARIES /opt/winhip/implibs/libamdhip64_7.dll.a)
endif()
if (NOT TARGET hip::device)
    add_library(hip::device INTERFACE IMPORTED)
    set_target_properties(hip::device PROPERTIES
        INTERFACE_LINK_LIBRARIES hip::host
        INTERFACE_COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CXX>:-xhip;--rocm-path=/opt/winhip/rocm;${_hip_offload}>")
endif()
