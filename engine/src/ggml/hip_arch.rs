//! The HIP device's architecture (`gcnArchName`, e.g. `gfx1103:sramecc-:xnack-`), which
//! ggml's device properties do not carry. Packages load ggml's HIP backend at run time, so
//! the HIP runtime is asked through the library that backend already loaded (found with
//! `dlopen(RTLD_NOLOAD)` / `GetModuleHandleA`); nothing new is loaded here.

use std::ffi::{c_int, c_void, CStr};

/// The HIP runtimes a package may carry, newest major first.
#[cfg(windows)]
const RUNTIMES: &[&CStr] = &[c"amdhip64_7.dll", c"amdhip64_6.dll"];
#[cfg(not(windows))]
const RUNTIMES: &[&CStr] = &[c"libamdhip64.so.7", c"libamdhip64.so.6"];

/// `hipDeviceProp_tR0600`, the layout `hipGetDevicePropertiesR0600` fills since HIP 6.0:
/// `gcnArchName` (256 bytes) starts at byte 1160 of 1472, as read from HIP 6.4.3's
/// `hip_runtime_api.h` with `offsetof`. The struct has no `long` member, so the layout is
/// the same on Windows x64; LLVM's `amdgpu-arch` tool reads the same offset there. AMD's
/// Windows runtime exports the symbol (`amdhip64_7.dll` 7.1 of the winhip track's pinned
/// wheel, read from its export table with objdump).
const GCN_ARCH_NAME_OFFSET: usize = 1160;
const GCN_ARCH_NAME_LEN: usize = 256;
/// Room for the struct and more (8 KiB), in case a later runtime writes a longer one.
const PROPS_WORDS: usize = 1024;

type GetDeviceProperties = unsafe extern "C" fn(*mut u64, c_int) -> c_int;

#[cfg(unix)]
mod os {
    use std::ffi::{c_char, c_int, c_void, CStr};

    extern "C" {
        fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        fn dlclose(handle: *mut c_void) -> c_int;
    }
    const RTLD_LAZY: c_int = 0x1;
    // glibc: succeed only when the library is loaded already.
    const RTLD_NOLOAD: c_int = 0x4;

    /// Calls `f` with `symbol` of the already loaded library `name`.
    pub fn with_symbol<T>(
        name: &CStr,
        symbol: &CStr,
        f: impl FnOnce(*mut c_void) -> T,
    ) -> Option<T> {
        // SAFETY: RTLD_NOLOAD opens nothing new; the handle is closed below.
        unsafe {
            let handle = dlopen(name.as_ptr(), RTLD_LAZY | RTLD_NOLOAD);
            if handle.is_null() {
                return None;
            }
            let sym = dlsym(handle, symbol.as_ptr());
            let out = (!sym.is_null()).then(|| f(sym));
            dlclose(handle);
            out
        }
    }
}

#[cfg(windows)]
mod os {
    use std::ffi::{c_char, c_void, CStr};

    #[link(name = "kernel32")]
    extern "system" {
        fn GetModuleHandleA(name: *const c_char) -> *mut c_void;
        fn GetProcAddress(module: *mut c_void, name: *const c_char) -> *mut c_void;
    }

    /// Calls `f` with `symbol` of the already loaded module `name`.
    pub fn with_symbol<T>(
        name: &CStr,
        symbol: &CStr,
        f: impl FnOnce(*mut c_void) -> T,
    ) -> Option<T> {
        // SAFETY: GetModuleHandleA only looks modules up (no reference is taken).
        unsafe {
            let module = GetModuleHandleA(name.as_ptr());
            if module.is_null() {
                return None;
            }
            let sym = GetProcAddress(module, symbol.as_ptr());
            (!sym.is_null()).then(|| f(sym))
        }
    }
}

/// The `gcnArchName` of HIP device `ordinal`, from the HIP runtime ggml's backend loaded;
/// `None` when no HIP runtime is loaded or it does not answer.
pub fn device_arch(ordinal: usize) -> Option<String> {
    let ordinal = c_int::try_from(ordinal).ok()?;
    RUNTIMES.iter().find_map(|name| {
        os::with_symbol(name, c"hipGetDevicePropertiesR0600", |sym| {
            // SAFETY: the symbol is hipGetDevicePropertiesR0600(hipDeviceProp_tR0600 *, int),
            // which writes at most 1472 bytes; the buffer holds 8192, 8-byte aligned.
            unsafe {
                let get: GetDeviceProperties =
                    std::mem::transmute::<*mut c_void, GetDeviceProperties>(sym);
                let mut props = vec![0u64; PROPS_WORDS];
                if get(props.as_mut_ptr(), ordinal) != 0 {
                    return None;
                }
                let bytes =
                    std::slice::from_raw_parts(props.as_ptr().cast::<u8>(), PROPS_WORDS * 8);
                let field = &bytes[GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN];
                let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
                std::str::from_utf8(&field[..end]).ok().map(str::to_string)
            }
        })
        .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_hip_runtime_loaded_means_no_answer() {
        // The test process never loads a HIP runtime: the query opens nothing and says so.
        assert_eq!(device_arch(0), None);
    }

    #[test]
    fn the_symbol_lookup_finds_a_loaded_library() {
        // The C library is always loaded: the same lookup path finds its symbols.
        #[cfg(all(unix, target_env = "gnu"))]
        assert_eq!(
            os::with_symbol(c"libc.so.6", c"strlen", |p| !p.is_null()),
            Some(true)
        );
    }
}
