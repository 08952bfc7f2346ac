# hipBLASLt for a Windows (MinGW) host: Debian's headers, and an import library for the
# ROCm 7 Windows DLL name (libhipblaslt.dll) made from hipBLASLt's exported symbol list.
# The DLL itself comes only from a real Windows SDK.
set(hipblaslt_FOUND TRUE)
if (NOT TARGET roc::hipblaslt)
    add_library(roc::hipblaslt INTERFACE IMPORTED)
    set_target_properties(roc::hipblaslt PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES /opt/winhip/rocm/include
        INTERFACE_LINK_LIBRARIES /opt/winhip/implibs/libhipblaslt.dll.a)
endif()
