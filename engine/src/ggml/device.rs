//! ggml's devices and backends: what the registry lists ([`devices`]) and a started
//! [`Backend`] on one of them.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::OnceLock;

use llama_cpp_sys_2 as sys;

use super::{init, GgmlError, Result};

/// What kind of hardware a device is, as ggml's registry reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    /// The host CPU.
    Cpu,
    /// A discrete GPU.
    Gpu,
    /// An integrated GPU.
    IGpu,
    /// An accelerator (BLAS, NPU...).
    Accel,
    /// A composite device.
    Meta,
}

/// One device from ggml's registry.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Index in ggml's device list.
    pub index: usize,
    /// Device name, e.g. `CPU`, `CUDA0`, `ROCm0`.
    pub name: String,
    /// Human description, e.g. the GPU model.
    pub description: String,
    /// Name of the backend registry that owns it: `CPU`, `CUDA`, `ROCm`, `Vulkan`, `Metal`...
    pub registry: String,
    /// Hardware type.
    pub device_type: DeviceType,
    /// Free memory in bytes.
    pub memory_free: u64,
    /// Total memory in bytes.
    pub memory_total: u64,
}

pub(super) fn cstr(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: ggml returns NUL-terminated strings that live as long as the registry.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// The folder the backend libraries were loaded from (set by [`init`] in builds with
/// dynamic backends).
pub(super) static BACKEND_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The file ggml's loader looks for when it loads GPU backend `name` (`hip`, `cuda`)
/// from `dir`: `ggml-hip.dll` on Windows, `libggml-hip.so` elsewhere.
fn backend_library_path(dir: &Path, name: &str) -> PathBuf {
    if cfg!(windows) {
        dir.join(format!("ggml-{name}.dll"))
    } else {
        dir.join(format!("libggml-{name}.so"))
    }
}

/// Why GPU backend `name` (`hip`, `cuda`, as ggml names its libraries) is not loaded
/// although its library sits in the backend folder: ggml's loader skips a library that
/// fails to load without a word, so this loads it once more, with the loader's message
/// kept. `None` when there is no such file (or it loads now, and is then registered).
/// The reason is ggml's text (on Linux the dynamic loader's `dlerror`); where ggml gives
/// none (its Windows loader reports no error text), the OS loader's own message
/// (`GetLastError` as text); empty when neither says anything.
pub fn backend_library_error(name: &str) -> Option<(PathBuf, String)> {
    init();
    let path = backend_library_path(BACKEND_DIR.get()?, name);
    if !path.is_file() {
        return None;
    }
    let c = CString::new(path.to_string_lossy().as_bytes()).ok()?;
    let _ = super::log::take_last_error();
    // SAFETY: c is a valid NUL-terminated path; ggml registers the backend if it loads.
    let reg = unsafe { sys::ggml_backend_load(c.as_ptr()) };
    if !reg.is_null() {
        return None;
    }
    // ggml's line: "load_backend: failed to load PATH: REASON".
    let after_path = format!("{}:", path.display());
    let reason = super::log::take_last_error()
        .and_then(|line| {
            line.split_once(&after_path)
                .map(|(_, r)| r.trim().to_string())
        })
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| os_loader_reason(&path));
    Some((path, reason))
}

/// The OS loader's message for a library that does not load (`LoadLibraryExW`'s error
/// on Windows, `dlerror` elsewhere); empty when it loads.
fn os_loader_reason(path: &Path) -> String {
    // SAFETY: this is the backend library ggml's loader has just tried to load in the
    // same way; loading runs its initialisers exactly as that attempt did, and the handle
    // is closed at once without any symbol being used.
    match unsafe { libloading::Library::new(path) } {
        Ok(_) => String::new(),
        Err(e) => std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_else(|| e.to_string()),
    }
}

/// The names of ggml's backend registries (after loading dynamic backends): a GPU
/// backend library that loaded but found no device still has its registry (`ROCm`).
pub fn registry_names() -> Vec<String> {
    init();
    // SAFETY: registry queries on valid indices; the names are owned by ggml.
    unsafe {
        (0..sys::ggml_backend_reg_count())
            .map(|i| cstr(sys::ggml_backend_reg_name(sys::ggml_backend_reg_get(i))))
            .collect()
    }
}

/// Lists every device ggml knows in this build (after loading dynamic backends).
pub fn devices() -> Vec<DeviceInfo> {
    init();
    // SAFETY: registry queries on valid indices; pointers are owned by ggml.
    unsafe {
        (0..sys::ggml_backend_dev_count())
            .map(|index| {
                let dev = sys::ggml_backend_dev_get(index);
                let reg = sys::ggml_backend_dev_backend_reg(dev);
                let (mut free, mut total) = (0usize, 0usize);
                sys::ggml_backend_dev_memory(dev, &mut free, &mut total);
                let device_type = match sys::ggml_backend_dev_type(dev) {
                    sys::GGML_BACKEND_DEVICE_TYPE_CPU => DeviceType::Cpu,
                    sys::GGML_BACKEND_DEVICE_TYPE_GPU => DeviceType::Gpu,
                    sys::GGML_BACKEND_DEVICE_TYPE_IGPU => DeviceType::IGpu,
                    sys::GGML_BACKEND_DEVICE_TYPE_ACCEL => DeviceType::Accel,
                    _ => DeviceType::Meta,
                };
                DeviceInfo {
                    index,
                    name: cstr(sys::ggml_backend_dev_name(dev)),
                    description: cstr(sys::ggml_backend_dev_description(dev)),
                    registry: if reg.is_null() {
                        String::new()
                    } else {
                        cstr(sys::ggml_backend_reg_name(reg))
                    },
                    device_type,
                    memory_free: free as u64,
                    memory_total: total as u64,
                }
            })
            .collect()
    }
}

/// A Vulkan device as the system's Vulkan loader lists it, before ggml's own choice (ggml
/// uses the dedicated GPUs, else the first integrated one, and hides devices of CPU type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VulkanPhysicalDevice {
    /// Its index in the loader's order: what `GGML_VK_VISIBLE_DEVICES` takes.
    pub index: usize,
    /// The driver's name for it (`llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// The driver reports it as a CPU (a software rasterizer such as Mesa's llvmpipe).
    pub cpu_type: bool,
}

/// Asks the system's Vulkan loader itself for its devices, to say why ggml's Vulkan backend
/// shows none. `Err` is the reason the loader gives: no loader library, or no driver
/// (`vkCreateInstance` refused). The loader is opened at run time, never linked.
pub fn vulkan_physical_devices() -> std::result::Result<Vec<VulkanPhysicalDevice>, String> {
    use ash::vk;
    // SAFETY: loading the system's Vulkan loader runs its initialisers, as loading
    // ggml's Vulkan backend (which imports it) does.
    let entry = unsafe { ash::Entry::load() }
        .map_err(|e| format!("the Vulkan loader could not be loaded: {e}"))?;
    let app = vk::ApplicationInfo::default().api_version(vk::make_api_version(0, 1, 2, 0));
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: `info` and `app` outlive the call; no allocation callbacks.
    let instance = unsafe { entry.create_instance(&info, None) }
        .map_err(|e| format!("vkCreateInstance failed ({e}): no Vulkan driver answered"))?;
    // SAFETY: the instance is live until it is destroyed at the end of this block and
    // every device handle comes from it; the properties are plain values.
    unsafe {
        let listed = instance.enumerate_physical_devices().map(|handles| {
            handles
                .iter()
                .enumerate()
                .map(|(index, &handle)| {
                    let p = instance.get_physical_device_properties(handle);
                    VulkanPhysicalDevice {
                        index,
                        name: p
                            .device_name_as_c_str()
                            .map(|c| c.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        cpu_type: p.device_type == vk::PhysicalDeviceType::CPU,
                    }
                })
                .collect()
        });
        instance.destroy_instance(None);
        listed.map_err(|e| format!("vkEnumeratePhysicalDevices failed ({e})"))
    }
}

/// An initialised backend (a stream on one device). Freed on drop.
pub struct Backend {
    pub(super) raw: NonNull<sys::ggml_backend>,
    device: DeviceInfo,
}

impl Backend {
    /// Starts the backend of a device from [`devices`].
    pub fn new(device: &DeviceInfo) -> Result<Self> {
        init();
        // SAFETY: the index came from the registry; a null return is handled.
        let raw = unsafe {
            let dev = sys::ggml_backend_dev_get(device.index);
            sys::ggml_backend_dev_init(dev, std::ptr::null())
        };
        let raw = NonNull::new(raw)
            .ok_or_else(|| GgmlError::Failed(format!("could not start device {}", device.name)))?;
        Ok(Backend {
            raw,
            device: device.clone(),
        })
    }

    /// The device this backend runs on.
    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }

    /// Sets the worker thread count, for backends that have one (the CPU backend).
    pub fn set_threads(&self, n: usize) {
        // SAFETY: the proc address, when present, has the documented signature
        // ggml_backend_set_n_threads_t; the backend pointer is live.
        unsafe {
            let dev = sys::ggml_backend_get_device(self.raw.as_ptr());
            if dev.is_null() {
                return;
            }
            let reg = sys::ggml_backend_dev_backend_reg(dev);
            if reg.is_null() {
                return;
            }
            let name = c"ggml_backend_set_n_threads";
            let f = sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
            if !f.is_null() {
                let f: unsafe extern "C" fn(sys::ggml_backend_t, std::os::raw::c_int) =
                    std::mem::transmute(f);
                f(self.raw.as_ptr(), n.max(1) as std::os::raw::c_int);
            }
        }
    }
}

// SAFETY: a ggml backend is not tied to the thread that started it; `Backend` is not
// Sync, so one thread at a time uses it.
unsafe impl Send for Backend {}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: we own the backend.
        unsafe { sys::ggml_backend_free(self.raw.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test machines have Mesa's lavapipe (`cargo xtask setup` installs
    /// mesa-vulkan-drivers and libvulkan1): the loader must list it, of CPU type, which is
    /// the device ggml hides and `--list-devices` explains.
    #[test]
    fn the_vulkan_loader_lists_lavapipe_as_a_cpu_type_device() {
        let listed = vulkan_physical_devices().unwrap_or_else(|e| {
            panic!("{e}; install Mesa's lavapipe and the loader (`cargo xtask setup`)")
        });
        let indices: Vec<usize> = listed.iter().map(|d| d.index).collect();
        assert_eq!(indices, (0..listed.len()).collect::<Vec<_>>(), "{listed:?}");
        assert!(
            listed
                .iter()
                .any(|d| d.cpu_type && d.name.starts_with("llvmpipe")),
            "lavapipe (llvmpipe, CPU type) must be among the loader's devices: {listed:?}"
        );
    }
}
