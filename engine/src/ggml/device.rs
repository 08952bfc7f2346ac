//! ggml's devices and backends: what the registry lists ([`devices`]), a started
//! [`Backend`] on one of them, and a CPU backend's worker threads ([`CpuThreads`]).

use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};

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
    /// The worker threads, for a backend that has them (the CPU backend); shared with
    /// the schedulers that run it, which size them before each graph.
    threads: Option<Arc<CpuThreads>>,
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
        let threads = CpuProcs::of(raw).map(|procs| {
            Arc::new(CpuThreads {
                backend: raw,
                procs,
                state: Mutex::new(ThreadsState {
                    wanted: 1,
                    limit: |wanted| wanted,
                    pool: None,
                    attached: false,
                    last: 0,
                }),
            })
        });
        Ok(Backend {
            raw,
            device: device.clone(),
            threads,
        })
    }

    /// The device this backend runs on.
    pub fn device(&self) -> &DeviceInfo {
        &self.device
    }

    /// Sets the most worker threads a graph runs with, for backends that have them
    /// (the CPU backend): a pool of that many is made now (when more than one, and more
    /// than the pool has), and each graph runs with as many of them as
    /// [`Backend::set_thread_limit`]'s function allows at the time ([`CpuThreads::fit`]).
    pub fn set_threads(&self, n: usize) {
        if let Some(t) = &self.threads {
            t.set_wanted(n.clamp(1, MAX_THREADS));
        }
    }

    /// Sets the function that decides, before each graph, how many of the threads
    /// asked for run it (given that number, it returns 1 to that number); by default,
    /// all of them.
    pub fn set_thread_limit(&self, limit: fn(usize) -> usize) {
        if let Some(t) = &self.threads {
            t.state().limit = limit;
        }
    }

    /// The worker threads of a CPU backend; `None` for other backends.
    pub fn cpu_threads(&self) -> Option<&Arc<CpuThreads>> {
        self.threads.as_ref()
    }
}

/// The most worker threads a CPU thread pool is made with (ggml's `GGML_MAX_N_THREADS`).
const MAX_THREADS: usize = 512;

/// The polling level the engine's CPU thread pools are made with: none. Between graphs
/// ggml's workers then sleep on a condition variable until the next graph is handed out,
/// instead of spinning for it (ggml's default level, 50, spins each idle worker for
/// 1024 x 128 x 50 pause instructions, about a tenth of a second, after every graph: CPU
/// taken from the programs beside it, and on a busy machine from its own next graph).
pub const THREADPOOL_POLL: u32 = 0;

type SetNThreads = unsafe extern "C" fn(sys::ggml_backend_t, c_int);
type ThreadpoolNew =
    unsafe extern "C" fn(*mut sys::ggml_threadpool_params) -> sys::ggml_threadpool_t;
type ThreadpoolFree = unsafe extern "C" fn(sys::ggml_threadpool_t);
type SetThreadpool = unsafe extern "C" fn(sys::ggml_backend_t, sys::ggml_threadpool_t);

/// The CPU backend's thread functions, from its registry (in builds with dynamic
/// backends the CPU backend is a library loaded at run time, so they are not linked).
struct CpuProcs {
    set_n_threads: SetNThreads,
    threadpool_new: ThreadpoolNew,
    threadpool_free: ThreadpoolFree,
    set_threadpool: SetThreadpool,
}

impl CpuProcs {
    /// The functions of `backend`'s registry; `None` unless it has all four (only the
    /// CPU backend does).
    fn of(backend: NonNull<sys::ggml_backend>) -> Option<CpuProcs> {
        // SAFETY: the backend is live; registry lookups return null or a function of
        // the documented ggml-cpu.h signature for each name, which the transmutes give.
        unsafe {
            let dev = sys::ggml_backend_get_device(backend.as_ptr());
            if dev.is_null() || sys::ggml_backend_dev_type(dev) != sys::GGML_BACKEND_DEVICE_TYPE_CPU
            {
                return None;
            }
            let reg = sys::ggml_backend_dev_backend_reg(dev);
            if reg.is_null() {
                return None;
            }
            let proc = |name: &CStr| {
                let f = sys::ggml_backend_reg_get_proc_address(reg, name.as_ptr());
                (!f.is_null()).then_some(f)
            };
            type Raw = *mut std::ffi::c_void;
            Some(CpuProcs {
                set_n_threads: std::mem::transmute::<Raw, SetNThreads>(proc(
                    c"ggml_backend_set_n_threads",
                )?),
                threadpool_new: std::mem::transmute::<Raw, ThreadpoolNew>(proc(
                    c"ggml_threadpool_new",
                )?),
                threadpool_free: std::mem::transmute::<Raw, ThreadpoolFree>(proc(
                    c"ggml_threadpool_free",
                )?),
                set_threadpool: std::mem::transmute::<Raw, SetThreadpool>(proc(
                    c"ggml_backend_cpu_set_threadpool",
                )?),
            })
        }
    }
}

/// How a CPU thread pool was made, as [`CpuThreads::pool`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolParams {
    /// Worker threads, the calling thread included.
    pub threads: usize,
    /// ggml's polling level (0: no polling, workers sleep between graphs).
    pub poll: u32,
}

/// A ggml thread pool, made with no polling ([`THREADPOOL_POLL`]). Freed on drop.
struct ThreadPool {
    raw: NonNull<sys::ggml_threadpool>,
    free: ThreadpoolFree,
    params: PoolParams,
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        // SAFETY: we own the pool, and no backend holds it any more (CpuThreads
        // detaches it first, or its backend is gone).
        unsafe { (self.free)(self.raw.as_ptr()) }
    }
}

/// What [`CpuThreads`] holds behind its lock.
struct ThreadsState {
    /// The most threads a graph runs with ([`Backend::set_threads`]).
    wanted: usize,
    /// How many of them run the next graph ([`Backend::set_thread_limit`]).
    limit: fn(usize) -> usize,
    /// The pool, made when more than one thread is first wanted, with that many
    /// threads (made again when more are wanted).
    pool: Option<ThreadPool>,
    /// True while the backend holds the pool.
    attached: bool,
    /// The threads the last graph ran with (0 before the first).
    last: usize,
}

/// A CPU backend's worker threads: a persistent ggml thread pool made with no polling
/// ([`THREADPOOL_POLL`]), so idle workers sleep rather than spin, and a count fitted to
/// each graph by a limit function ([`Backend::set_thread_limit`]). ggml's own default is
/// a pool made and joined for every graph, whose workers wait for each other at every
/// node by spinning: with more threads than free cores, a worker spins through whole
/// time slices while the one it waits for is descheduled, which is how a busy machine
/// made a 4 s transcription take 800 s.
pub struct CpuThreads {
    backend: NonNull<sys::ggml_backend>,
    procs: CpuProcs,
    state: Mutex<ThreadsState>,
}

// SAFETY: the backend pointer and the pool are used only under the mutex, and only by
// the thread that runs the backend's graphs (a Backend and a Scheduler are not Sync, so
// one thread at a time computes on a backend).
unsafe impl Send for CpuThreads {}
// SAFETY: as above; every method takes the lock.
unsafe impl Sync for CpuThreads {}

impl CpuThreads {
    fn state(&self) -> std::sync::MutexGuard<'_, ThreadsState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the most threads a graph runs with, making a pool of that many when more
    /// than one are wanted and the pool has fewer (the old pool detached first).
    fn set_wanted(&self, wanted: usize) {
        let mut st = self.state();
        st.wanted = wanted;
        if wanted > 1 && st.pool.as_ref().is_none_or(|p| p.params.threads < wanted) {
            if st.attached {
                // SAFETY: the backend is live; null detaches (and pauses) the old pool,
                // which is dropped below only once detached.
                unsafe { (self.procs.set_threadpool)(self.backend.as_ptr(), std::ptr::null_mut()) };
                st.attached = false;
            }
            st.pool = self.new_pool(wanted);
        }
    }

    /// Sets the backend up for its next graph: as many threads as the limit allows now
    /// (1 to the number asked for), on the persistent pool when more than one, on ggml's
    /// calling thread alone otherwise (the pool is then detached, which pauses its
    /// sleeping workers until it is attached again). Returns the count.
    pub fn fit(&self) -> usize {
        let mut st = self.state();
        let wanted = st.wanted;
        let n = (st.limit)(wanted).clamp(1, wanted);
        let pool = st.pool.as_ref().filter(|_| n > 1).map(|p| p.raw.as_ptr());
        // SAFETY: the backend is live; the pool (or null) outlives its attachment: it is
        // detached before it is dropped, or its backend is freed first.
        unsafe {
            match pool {
                Some(p) if !st.attached => (self.procs.set_threadpool)(self.backend.as_ptr(), p),
                None if st.attached => {
                    (self.procs.set_threadpool)(self.backend.as_ptr(), std::ptr::null_mut())
                }
                _ => {}
            }
            (self.procs.set_n_threads)(self.backend.as_ptr(), n as c_int);
        }
        st.attached = pool.is_some();
        st.last = n;
        n
    }

    /// A pool of `threads` threads with no polling, or `None` when ggml cannot make one
    /// (then graphs run on ggml's per-graph pools, as without this).
    fn new_pool(&self, threads: usize) -> Option<ThreadPool> {
        // SAFETY: params is initialised by ggml's own initialiser before it is changed
        // and passed; the returned pool is owned by the ThreadPool made of it.
        unsafe {
            let mut params = std::mem::zeroed::<sys::ggml_threadpool_params>();
            sys::ggml_threadpool_params_init(&mut params, threads as c_int);
            params.poll = THREADPOOL_POLL;
            let raw = NonNull::new((self.procs.threadpool_new)(&mut params))?;
            Some(ThreadPool {
                raw,
                free: self.procs.threadpool_free,
                params: PoolParams {
                    threads,
                    poll: params.poll,
                },
            })
        }
    }

    /// How the pool was made (`None` while no more than one thread was asked for).
    pub fn pool(&self) -> Option<PoolParams> {
        self.state().pool.as_ref().map(|p| p.params)
    }

    /// The threads the last graph ran with (0 before the first).
    pub fn last(&self) -> usize {
        self.state().last
    }
}

// SAFETY: a ggml backend is not tied to the thread that started it; `Backend` is not
// Sync, so one thread at a time uses it.
unsafe impl Send for Backend {}

impl Drop for Backend {
    fn drop(&mut self) {
        // SAFETY: we own the backend. Its pool (in `threads`) is freed after it, when
        // the last scheduler holding the threads lets go.
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
