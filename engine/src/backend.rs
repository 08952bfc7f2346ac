//! Backend selection: which ggml device runs a model, chosen from the user's
//! `--backend/--device/--threads` and what this build (and machine) has.

use std::path::Path;
use std::str::FromStr;
use std::sync::OnceLock;

use crate::error::{EngineError, Result};
use crate::ggml::{self, Backend, DeviceInfo, DeviceType, Scheduler, VulkanPhysicalDevice};

/// Backends users can ask for (`rocm` is an alias of `hip`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// ggml's CPU backend.
    Cpu,
    /// NVIDIA GPUs.
    Cuda,
    /// AMD GPUs through HIP/ROCm.
    Hip,
    /// Vulkan GPUs.
    Vulkan,
    /// Apple GPUs.
    Metal,
    /// The first GPU found, in the order CUDA, HIP, Vulkan (then Metal), else the CPU.
    Best,
}

impl FromStr for BackendKind {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "cpu" => BackendKind::Cpu,
            "cuda" => BackendKind::Cuda,
            "hip" | "rocm" => BackendKind::Hip,
            "vulkan" => BackendKind::Vulkan,
            "metal" => BackendKind::Metal,
            "best" | "auto" => BackendKind::Best,
            _ => {
                return Err(EngineError::Usage(format!(
                    "unknown backend '{s}' (expected cpu, cuda, hip (alias rocm), vulkan, metal or best)"
                )))
            }
        })
    }
}

impl BackendKind {
    /// The name users see in messages (`HIP`, `CUDA`...).
    pub fn display_name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "CPU",
            BackendKind::Cuda => "CUDA",
            BackendKind::Hip => "HIP",
            BackendKind::Vulkan => "Vulkan",
            BackendKind::Metal => "Metal",
            BackendKind::Best => "best",
        }
    }

    /// The lower-case flag spelling.
    pub fn flag_name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
            BackendKind::Vulkan => "vulkan",
            BackendKind::Metal => "metal",
            BackendKind::Best => "best",
        }
    }

    /// Whether this build was compiled with the backend.
    pub fn compiled_in(self) -> bool {
        match self {
            BackendKind::Cpu | BackendKind::Best => true,
            BackendKind::Cuda => cfg!(feature = "cuda"),
            BackendKind::Hip => cfg!(feature = "hip"),
            BackendKind::Vulkan => cfg!(feature = "vulkan"),
            BackendKind::Metal => cfg!(feature = "metal"),
        }
    }

    /// The backend a device belongs to, told apart by ggml registry name (HIP devices
    /// come from the `ROCm` registry, CUDA ones from `CUDA`).
    pub fn of_device(dev: &DeviceInfo) -> Option<BackendKind> {
        if dev.device_type == DeviceType::Cpu {
            return Some(BackendKind::Cpu);
        }
        BackendKind::of_registry(&dev.registry)
    }

    /// The backend a ggml registry name belongs to (`ROCm` is HIP).
    pub fn of_registry(name: &str) -> Option<BackendKind> {
        let reg = name.to_ascii_lowercase();
        if reg == "cpu" {
            Some(BackendKind::Cpu)
        } else if reg.starts_with("rocm") || reg.starts_with("hip") {
            Some(BackendKind::Hip)
        } else if reg.starts_with("cuda") {
            Some(BackendKind::Cuda)
        } else if reg.starts_with("vulkan") {
            Some(BackendKind::Vulkan)
        } else if reg.starts_with("metal") || reg.starts_with("mtl") {
            Some(BackendKind::Metal)
        } else {
            None
        }
    }
}

/// What the engine's own CPU kernels run as on this machine, for `--list-devices`:
/// `float:<level>,q8_0:<level>` (levels `avx512` or `avx2`), or `ggml` when ggml's
/// ops run instead (a CPU without AVX2 and FMA, or `AUDIOCPP_CPU_KERNELS=ggml`).
/// `AUDIOCPP_CPU_KERNELS=avx2` caps the levels at AVX2.
pub fn cpu_kernels() -> String {
    match (
        crate::cpu_kernels::kernels_switched_off(),
        crate::cpu_kernels::SimdLevel::allowed(),
        crate::cpu_kernels::q8_kernel_level(),
    ) {
        (false, Some(float), Some(q8)) => format!("float:{},q8_0:{}", float.name(), q8.name()),
        _ => "ggml".to_string(),
    }
}

/// Backends compiled into this build, in flag spelling.
pub fn compiled_backends() -> Vec<&'static str> {
    [
        BackendKind::Cpu,
        BackendKind::Cuda,
        BackendKind::Hip,
        BackendKind::Vulkan,
        BackendKind::Metal,
    ]
    .into_iter()
    .filter(|k| k.compiled_in())
    .map(BackendKind::flag_name)
    .collect()
}

/// A device as listed by `--list-devices`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceListing {
    /// Index among devices of the same backend (what `--device` takes).
    pub index: usize,
    /// Backend in flag spelling (`cpu`, `hip`...).
    pub backend: String,
    /// ggml device name.
    pub name: String,
    /// Description (GPU model, CPU name).
    pub description: String,
    /// `cpu`, `gpu`, `igpu`, `accel`.
    pub kind: String,
    /// Free memory in bytes.
    pub memory_free: u64,
    /// Total memory in bytes.
    pub memory_total: u64,
}

/// Every usable device with its backend.
pub fn list_devices() -> Vec<DeviceListing> {
    let mut per_backend = std::collections::HashMap::new();
    ggml::devices()
        .into_iter()
        .filter_map(|d| {
            let kind = BackendKind::of_device(&d)?;
            let counter = per_backend.entry(kind.flag_name()).or_insert(0usize);
            let index = *counter;
            *counter += 1;
            Some(DeviceListing {
                index,
                backend: kind.flag_name().to_string(),
                name: d.name,
                description: d.description,
                kind: format!("{:?}", d.device_type).to_lowercase(),
                memory_free: d.memory_free,
                memory_total: d.memory_total,
            })
        })
        .collect()
}

/// A GPU backend library that sits in the package but does not load (ggml-hip.dll
/// without the hipBLASLt DLL it imports): ggml's loader skips it without a word, so
/// `--list-devices` and a run that asks for the backend say so instead of "not in this
/// build".
#[derive(Debug, Clone, serde::Serialize)]
pub struct UnloadableBackend {
    /// Backend in flag spelling (`hip`, `cuda`...).
    pub backend: String,
    /// The library's file name (`ggml-hip.dll`, `libggml-hip.so`).
    pub file: String,
    /// The loader's reason; empty when it gives none.
    pub reason: String,
    /// What the user can do, from what the package's manifest says it lacks.
    pub advice: String,
}

/// The GPU backends, in the order parameter 'backend' best tries them.
const GPU_KINDS: [BackendKind; 4] = [
    BackendKind::Cuda,
    BackendKind::Hip,
    BackendKind::Vulkan,
    BackendKind::Metal,
];

/// True when ggml has a registry for `kind`: a GPU backend library that loaded but found
/// no device (ggml-hip on a machine without an AMD GPU) still has one, which is "no
/// device", not "not in this build".
fn backend_registered(kind: BackendKind) -> bool {
    ggml::registry_names()
        .iter()
        .any(|r| BackendKind::of_registry(r) == Some(kind))
}

/// The library of GPU backend `kind`, when this build loads backends at run time, the
/// library sits in the backend folder, and it does not load.
fn unloadable_backend(kind: BackendKind) -> Option<UnloadableBackend> {
    if !cfg!(feature = "dynamic-backends") || kind.compiled_in() || backend_registered(kind) {
        return None;
    }
    let (path, reason) = ggml::backend_library_error(kind.flag_name())?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let absent = crate::kernel_guard::read_manifest(dir)
        .ok()
        .flatten()
        .map(|m| m.absent_sdk_only)
        .unwrap_or_default();
    Some(UnloadableBackend {
        backend: kind.flag_name().to_string(),
        file: path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        reason,
        advice: not_loadable_advice(&absent, dir),
    })
}

/// Every GPU backend library in the package that does not load, for `--list-devices`,
/// and a Vulkan backend that loaded but whose devices ggml hides (all of CPU type).
pub fn unloadable_backends() -> Vec<UnloadableBackend> {
    GPU_KINDS
        .into_iter()
        .filter_map(unloadable_explained)
        .chain(hidden_vulkan_devices().map(|h| h.listing()))
        .collect()
}

/// What to do when the Vulkan backend's library does not start: it is the driver side
/// (the Vulkan loader and the driver's ICD), not the package, that is missing.
const VULKAN_DRIVER_ADVICE: &str = "install or update the GPU driver with its Vulkan support (the Vulkan loader, libvulkan.so.1 or vulkan-1.dll, and the driver's ICD), or set parameter 'backend' to cpu";

/// [`unloadable_backend`]; for the Vulkan backend, whose failure ggml's loader does not
/// explain, the Vulkan loader's own reason (no loader, no driver) and the driver advice.
fn unloadable_explained(kind: BackendKind) -> Option<UnloadableBackend> {
    let mut u = unloadable_backend(kind)?;
    if kind == BackendKind::Vulkan {
        if let Err(why) = ggml::vulkan_physical_devices() {
            u.reason = if u.reason.is_empty() {
                why
            } else {
                format!("{}; {why}", u.reason)
            };
            u.advice = VULKAN_DRIVER_ADVICE.into();
        }
    }
    Some(u)
}

/// Vulkan devices ggml hides: the backend loaded and lists none, and every device the
/// Vulkan loader has is of CPU type (a software driver such as Mesa's llvmpipe).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HiddenVulkanDevices {
    /// Why there is no Vulkan device.
    reason: String,
    /// How to use them anyway.
    show: String,
}

impl HiddenVulkanDevices {
    /// The note for `hidden` (the loader's CPU-type devices; not empty).
    fn new(hidden: &[VulkanPhysicalDevice]) -> Self {
        let names: Vec<String> = hidden
            .iter()
            .map(|d| format!("{} (Vulkan device {})", d.name, d.index))
            .collect();
        let indices: Vec<String> = hidden.iter().map(|d| d.index.to_string()).collect();
        let (devices, are, them) = if hidden.len() == 1 {
            ("device", "is", "it")
        } else {
            ("devices", "are", "them")
        };
        HiddenVulkanDevices {
            reason: format!(
                "the Vulkan backend loaded, but the only Vulkan {devices} here {are} of CPU type (a software driver), which ggml hides: {}",
                names.join(", ")
            ),
            show: format!(
                "set the environment variable GGML_VK_VISIBLE_DEVICES={} to use {them} anyway (it computes on the CPU, more slowly than parameter 'backend' cpu)",
                indices.join(",")
            ),
        }
    }

    /// The note as `--list-devices` prints it, beside the backends that do not load.
    fn listing(&self) -> UnloadableBackend {
        UnloadableBackend {
            backend: BackendKind::Vulkan.flag_name().into(),
            file: if cfg!(windows) {
                "ggml-vulkan.dll"
            } else {
                "libggml-vulkan.so"
            }
            .into(),
            reason: self.reason.clone(),
            advice: format!("{}, or set parameter 'backend' to cpu", self.show),
        }
    }
}

/// [`HiddenVulkanDevices`] when this machine has them.
fn hidden_vulkan_devices() -> Option<HiddenVulkanDevices> {
    if !cfg!(feature = "dynamic-backends")
        || !backend_registered(BackendKind::Vulkan)
        || ggml::devices()
            .iter()
            .any(|d| BackendKind::of_device(d) == Some(BackendKind::Vulkan))
    {
        return None;
    }
    let hidden: Vec<VulkanPhysicalDevice> = ggml::vulkan_physical_devices()
        .ok()?
        .into_iter()
        .filter(|d| d.cpu_type)
        .collect();
    (!hidden.is_empty()).then(|| HiddenVulkanDevices::new(&hidden))
}

/// The one warning `--backend best` prints before it runs on the CPU because the GPU
/// backend libraries in the package could not start (`unloadable`); `None` when all that
/// is missing is a GPU.
fn best_fallback_warning(unloadable: &[UnloadableBackend]) -> Option<String> {
    if unloadable.is_empty() {
        return None;
    }
    let each: Vec<String> = unloadable
        .iter()
        .map(|u| {
            let kind = BackendKind::from_str(&u.backend)
                .map(BackendKind::display_name)
                .unwrap_or("GPU");
            if u.reason.is_empty() {
                format!("the {kind} backend ({}) could not start", u.file)
            } else {
                format!(
                    "the {kind} backend ({}) could not start: {}",
                    u.file, u.reason
                )
            }
        })
        .collect();
    Some(format!(
        "{}; parameter 'backend' best runs on the CPU instead",
        each.join("; ")
    ))
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Backend.
    pub backend: BackendKind,
    /// Device index among that backend's devices.
    pub device: Option<usize>,
    /// The most CPU threads a graph runs with (0 = all cores); each graph runs with
    /// those of them that have a free core at the time ([`threads_free_now`]).
    pub threads: usize,
}

impl RuntimeOptions {
    /// The options of a VAD model that serves an ASR model run with `self`, on `backend`:
    /// the thread cap is shared, the device index only when the backends are the same.
    /// Silero's recurrence is hundreds of tiny steps, each a kernel launch on a GPU, so
    /// the front ends default the VAD to the CPU (docs/build/CUDA.md has the numbers).
    pub fn for_vad(&self, backend: BackendKind) -> RuntimeOptions {
        RuntimeOptions {
            backend,
            device: self.device.filter(|_| backend == self.backend),
            threads: self.threads,
        }
    }
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            backend: BackendKind::Cpu,
            device: None,
            threads: 0,
        }
    }
}

/// The worker threads to run with: `requested` (0 = all cores) capped at the machine's
/// `cores`, and the warning to print when the request was capped. More threads than
/// cores only slow ggml down, and an absurd count (100000) would spawn that many
/// threads or fail to.
pub fn clamp_threads(requested: usize, cores: usize) -> (usize, Option<String>) {
    let cores = cores.max(1);
    match requested {
        0 => (cores, None),
        n if n > cores => (
            cores,
            Some(format!(
                "parameter 'threads' {n} is more than the {cores} cores of this machine; using {cores}"
            )),
        ),
        n => (n, None),
    }
}

/// How many of `wanted` worker threads run the next graph: on Linux, as many as the
/// machine has cores not taken by other running threads now ([`fit_threads`] of the
/// online CPUs and `/proc/loadavg`'s count of runnable threads), at least 1; elsewhere,
/// or when those files cannot be read, `wanted`.
///
/// Why: ggml's workers wait for each other at every node of a graph by spinning. With
/// more workers than free cores, a worker spins through whole time slices while the one
/// it waits for is off the CPU: two `nice -n 10` busy loops made a 9 s clip's 0.4 s
/// transcription take 10 s, and one of 4 s take 800 s (1 thread: 15 s). Fewer threads
/// than asked for cost at most the parallel speed-up; more than the free cores cost that
/// much.
pub fn threads_free_now(wanted: usize) -> usize {
    if wanted <= 1 {
        return 1;
    }
    match (host_cpus(), runnable_threads()) {
        (Some(cpus), Some(runnable)) => fit_threads(wanted, cpus, runnable),
        _ => wanted,
    }
}

/// [`threads_free_now`]'s arithmetic: of `cpus` cores, those not taken by the
/// `runnable` threads other than the caller's own (which is one of them, and runs the
/// graph), at least 1 and at most `wanted`.
pub fn fit_threads(wanted: usize, cpus: usize, runnable: usize) -> usize {
    let others = runnable.saturating_sub(1);
    cpus.saturating_sub(others).clamp(1, wanted.max(1))
}

/// The machine's online CPUs (`/sys/devices/system/cpu/online`, the same machine-wide
/// count `/proc/loadavg` is counted against, also in a container), read once.
fn host_cpus() -> Option<usize> {
    static CPUS: OnceLock<Option<usize>> = OnceLock::new();
    *CPUS.get_or_init(|| {
        let list = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
        cpu_list_len(&list)
    })
}

/// The number of CPUs in a Linux CPU list (`0-3,8,10-11`).
fn cpu_list_len(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.trim().split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => {
                b.parse::<usize>()
                    .ok()?
                    .checked_sub(a.parse::<usize>().ok()?)?
                    + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// The threads running or waiting to run on the whole machine now, the caller
/// included (the numerator of `/proc/loadavg`'s fourth field).
fn runnable_threads() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace()
        .nth(3)?
        .split_once('/')?
        .0
        .parse()
        .ok()
}

/// What the start-up kernel guard's verdict means for the run.
#[derive(Debug, PartialEq, Eq)]
enum GuardOutcome {
    /// The device is covered (or nothing is recorded to check against).
    Proceed,
    /// `--backend best`: run on the CPU, after saying why.
    UseCpu(String),
    /// A backend asked for by name: refuse with the guard's line.
    Refuse(String),
}

/// What to do about a backend library that is in the package folder `dir` but does not
/// load: copy in what the package was built without (its manifest's `absent_sdk_only`
/// entries that `dir` still lacks), else make the folder whole again.
fn not_loadable_advice(absent_sdk_only: &[String], dir: &Path) -> String {
    let missing: Vec<&str> = absent_sdk_only
        .iter()
        .map(String::as_str)
        .filter(|entry| !dir.join(entry.trim_end_matches('/')).exists())
        .collect();
    if missing.is_empty() {
        "a library it needs is missing or does not load: unzip the package again, or set parameter 'backend' to cpu".into()
    } else {
        format!(
            "this package was built without {}, which come only from the SDK: copy them next to the executables (see the package's README), or set parameter 'backend' to cpu",
            missing.join(" and ")
        )
    }
}

/// Decides what the guard's refusal line (if any) means for the backend the user asked for.
fn guard_outcome(requested: BackendKind, refusal: Option<String>) -> GuardOutcome {
    match (refusal, requested) {
        (None, _) => GuardOutcome::Proceed,
        (Some(line), BackendKind::Best) => GuardOutcome::UseCpu(line),
        (Some(line), _) => GuardOutcome::Refuse(line),
    }
}

/// The chosen device's backend, plus the CPU backend for ops the device lacks.
pub struct Runtime {
    main: Backend,
    cpu: Option<Backend>,
    threads: usize,
}

impl Runtime {
    /// Picks and starts the device for `opts`, with a clear error when the build or the
    /// machine lacks it.
    pub fn new(opts: &RuntimeOptions) -> Result<Self> {
        let all = ggml::devices();
        let of_kind = |k: BackendKind| -> Vec<&DeviceInfo> {
            all.iter()
                .filter(|d| BackendKind::of_device(d) == Some(k))
                .collect()
        };
        let wanted = match opts.backend {
            BackendKind::Best => GPU_KINDS
                .into_iter()
                .find(|k| !of_kind(*k).is_empty())
                .unwrap_or(BackendKind::Cpu),
            k => k,
        };
        if opts.backend == BackendKind::Best && wanted == BackendKind::Cpu {
            let unloadable: Vec<UnloadableBackend> = GPU_KINDS
                .into_iter()
                .filter_map(unloadable_explained)
                .collect();
            if let Some(w) = best_fallback_warning(&unloadable) {
                crate::error::warn(&w);
            }
        }
        let candidates = of_kind(wanted);
        if candidates.is_empty() {
            let dynamic = cfg!(feature = "dynamic-backends");
            if !wanted.compiled_in() && !dynamic {
                return Err(EngineError::BackendUnavailable {
                    requested: wanted.display_name().to_string(),
                    available: compiled_backends().join(", "),
                });
            }
            if let Some(u) = unloadable_explained(wanted) {
                return Err(EngineError::BackendNotLoadable {
                    requested: wanted.display_name().to_string(),
                    file: u.file,
                    reason: if u.reason.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", u.reason)
                    },
                    advice: u.advice,
                });
            }
            if dynamic && !wanted.compiled_in() && !backend_registered(wanted) {
                let mut present: Vec<&str> = all
                    .iter()
                    .filter_map(BackendKind::of_device)
                    .map(BackendKind::flag_name)
                    .collect();
                present.dedup();
                return Err(EngineError::BackendUnavailable {
                    requested: wanted.display_name().to_string(),
                    available: present.join(", "),
                });
            }
            if let Some(h) = (wanted == BackendKind::Vulkan)
                .then(hidden_vulkan_devices)
                .flatten()
            {
                return Err(EngineError::NoDevice {
                    requested: wanted.display_name().to_string(),
                    detail: format!("{}; {}", h.reason, h.show),
                });
            }
            return Err(EngineError::NoDevice {
                requested: wanted.display_name().to_string(),
                detail: "no device answered: check the GPU driver and that the runtime libraries sit next to the executable".into(),
            });
        }
        let index = opts.device.unwrap_or(0);
        let dev = candidates.get(index).ok_or_else(|| {
            EngineError::Usage(format!(
                "parameter 'device' {index} does not exist: this machine has {} {} device(s), counted from 0 (the device list shows them)",
                candidates.len(),
                wanted.display_name()
            ))
        })?;
        let label = format!("{} ({})", dev.name, dev.description);
        let refusal = (wanted == BackendKind::Hip)
            .then(|| crate::kernel_guard::check_hip_device(&label, index))
            .flatten();
        match guard_outcome(opts.backend, refusal) {
            GuardOutcome::Proceed => {}
            GuardOutcome::UseCpu(line) => {
                crate::error::warn(&format!(
                    "{line}; parameter 'backend' best runs on the CPU instead"
                ));
                let cpu = RuntimeOptions {
                    backend: BackendKind::Cpu,
                    device: None,
                    threads: opts.threads,
                };
                return Runtime::new(&cpu);
            }
            GuardOutcome::Refuse(line) => return Err(EngineError::GpuNotCovered(line)),
        }
        let main = match Backend::new(dev) {
            Ok(b) => b,
            Err(e) if opts.backend == BackendKind::Best => {
                crate::error::warn(&format!(
                    "{label} could not start ({e}); parameter 'backend' best runs on the CPU instead"
                ));
                return Runtime::new(&RuntimeOptions {
                    backend: BackendKind::Cpu,
                    device: None,
                    threads: opts.threads,
                });
            }
            Err(e) => return Err(e.into()),
        };
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let (threads, warning) = clamp_threads(opts.threads, cores);
        if let Some(w) = warning {
            crate::error::warn(&w);
        }
        main.set_threads(threads);
        main.set_thread_limit(threads_free_now);
        let cpu = if wanted == BackendKind::Cpu {
            None
        } else {
            let cpu_dev = of_kind(BackendKind::Cpu)
                .into_iter()
                .next()
                .ok_or_else(|| EngineError::NoDevice {
                    requested: "CPU".into(),
                    detail: "no ggml CPU backend could be loaded".into(),
                })?;
            let cpu = Backend::new(cpu_dev)?;
            cpu.set_threads(threads);
            cpu.set_thread_limit(threads_free_now);
            Some(cpu)
        };
        Ok(Runtime { main, cpu, threads })
    }

    /// A second runtime on the same devices with the same thread cap: backends of its
    /// own (a CPU backend's work buffer and worker threads serve one graph at a time),
    /// whose schedulers can run graphs over weights uploaded through `self`.
    pub fn fork(&self) -> Result<Runtime> {
        let start = |b: &Backend| -> Result<Backend> {
            let new = Backend::new(b.device())?;
            new.set_threads(self.threads);
            new.set_thread_limit(threads_free_now);
            Ok(new)
        };
        Ok(Runtime {
            main: start(&self.main)?,
            cpu: self.cpu.as_ref().map(start).transpose()?,
            threads: self.threads,
        })
    }

    /// The backend that holds the weights.
    pub fn main(&self) -> &Backend {
        &self.main
    }

    /// The device in use.
    pub fn device(&self) -> &DeviceInfo {
        self.main.device()
    }

    /// Changes the most CPU worker threads of the next computations (both backends).
    pub fn set_threads(&self, n: usize) {
        self.main.set_threads(n);
        if let Some(cpu) = &self.cpu {
            cpu.set_threads(n);
        }
    }

    /// True when graphs run on the CPU backend, so the engine's own CPU kernels (ggml
    /// custom ops) may replace ggml's (see [`cpu_kernels`]).
    pub fn cpu_kernels(&self) -> bool {
        self.cpu.is_none() && !crate::cpu_kernels::kernels_switched_off()
    }

    /// The most worker threads for CPU work (what was asked for, capped at the cores).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The CPU backend's worker threads (the main backend's when it is the CPU), to
    /// see how they are made and how many ran the last graph.
    pub fn cpu_threads(&self) -> Option<&std::sync::Arc<crate::ggml::CpuThreads>> {
        self.cpu.as_ref().unwrap_or(&self.main).cpu_threads()
    }

    /// A scheduler over the device (and the CPU as fallback) for graphs up to `graph_size`.
    pub fn scheduler(&self, graph_size: usize) -> Result<Scheduler> {
        let mut backends = vec![&self.main];
        if let Some(cpu) = &self.cpu {
            backends.push(cpu);
        }
        Ok(Scheduler::new(&backends, graph_size)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_map_to_backends_and_the_cpu_one_is_always_there() {
        assert_eq!(BackendKind::of_registry("ROCm"), Some(BackendKind::Hip));
        assert_eq!(BackendKind::of_registry("CUDA"), Some(BackendKind::Cuda));
        assert_eq!(BackendKind::of_registry("CPU"), Some(BackendKind::Cpu));
        assert_eq!(BackendKind::of_registry("BLAS"), None);
        assert!(ggml::registry_names().iter().any(|r| r == "CPU"));
    }

    #[test]
    fn threads_are_clamped_to_the_machine_with_a_warning() {
        assert_eq!(clamp_threads(0, 8), (8, None));
        assert_eq!(clamp_threads(3, 8), (3, None));
        let (n, warning) = clamp_threads(100_000, 8);
        assert_eq!(n, 8);
        assert!(warning
            .unwrap()
            .contains("parameter 'threads' 100000 is more than the 8 cores"));
        assert_eq!(clamp_threads(usize::MAX, 0).0, 1);
    }

    #[test]
    fn threads_fit_the_cores_other_threads_leave() {
        // 2 cores, 2 busy loops and the caller: 1 thread.
        assert_eq!(fit_threads(2, 2, 3), 1);
        // An idle machine: all that were asked for.
        assert_eq!(fit_threads(2, 2, 1), 2);
        assert_eq!(fit_threads(8, 16, 5), 8);
        assert_eq!(fit_threads(8, 8, 5), 4);
        assert_eq!(fit_threads(4, 2, 40), 1);
        assert_eq!(fit_threads(1, 64, 1), 1);
        assert_eq!(fit_threads(0, 4, 0), 1);
        assert_eq!(cpu_list_len("0-15\n"), Some(16));
        assert_eq!(cpu_list_len("0-3,8,10-11"), Some(7));
        assert_eq!(cpu_list_len("0"), Some(1));
        assert_eq!(cpu_list_len(""), None);
        assert_eq!(cpu_list_len("3-1"), None);
    }

    /// Runs one product of two 64 x 64 matrices on `runtime`; returns the result.
    fn one_product(runtime: &Runtime) -> Vec<f32> {
        use crate::ggml::{Context, DType};
        let a: Vec<f32> = (0..64 * 64).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..64 * 64).map(|i| (i % 5) as f32 * 0.5).collect();
        let ctx = Context::new(8, 16).unwrap();
        let ta = ctx.new_tensor(DType::F32, &[64, 64], "a");
        let tb = ctx.new_tensor(DType::F32, &[64, 64], "b");
        ta.mark_input();
        tb.mark_input();
        let y = ctx.mul_mat(ta, tb);
        y.mark_output();
        let mut graph = ctx.new_graph(16);
        graph.expand(y);
        let mut sched = runtime.scheduler(16).unwrap();
        sched.compute(&mut graph, &[(ta, &a), (tb, &b)]).unwrap();
        y.read_f32().unwrap()
    }

    /// A runtime asking for every core (at least 2: the test cannot show a drop on one).
    fn all_cores() -> Runtime {
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        assert!(
            runtime.threads() >= 2,
            "this test needs a machine of 2 cores or more, this one has {}",
            runtime.threads()
        );
        runtime
    }

    #[test]
    fn each_graph_runs_with_the_threads_the_limit_leaves() {
        let runtime = all_cores();
        let threads = runtime.cpu_threads().unwrap();
        assert_eq!(threads.last(), 0);
        runtime.main.set_thread_limit(|wanted| wanted);
        let all = one_product(&runtime);
        assert_eq!(threads.last(), runtime.threads());
        let pool = threads.pool().unwrap();
        assert_eq!(pool.threads, runtime.threads());
        assert_eq!(pool.poll, ggml::THREADPOOL_POLL);
        runtime.main.set_thread_limit(|_| 1);
        assert_eq!(one_product(&runtime), all);
        assert_eq!(threads.last(), 1);
        // Back to the pool after a graph without it; a limit above the asked-for count
        // is cut to that count.
        runtime.main.set_thread_limit(|wanted| wanted * 4);
        assert_eq!(one_product(&runtime), all);
        assert_eq!(threads.last(), runtime.threads());
        runtime.set_threads(1);
        assert_eq!(one_product(&runtime), all);
        assert_eq!(threads.last(), 1);
    }

    /// Busy loops started here, killed on drop (also when an assert fails).
    struct Hogs(Vec<std::process::Child>);

    impl Drop for Hogs {
        fn drop(&mut self) {
            for child in &mut self.0 {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    #[test]
    fn a_graph_runs_on_one_thread_when_busy_loops_take_every_core() {
        let runtime = all_cores();
        let cpus = host_cpus().expect("this Linux lists its online CPUs");
        assert!(runnable_threads().is_some(), "/proc/loadavg cannot be read");
        // As many `nice -n 10 yes` loops as the machine has cores (the hog, on
        // each core): with the thread computing, more runnable threads than cores.
        let mut hogs = Hogs(Vec::new());
        for _ in 0..cpus {
            let child = std::process::Command::new("nice")
                .args(["-n", "10", "yes"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("cannot start `nice -n 10 yes`");
            hogs.0.push(child);
        }
        // Wait until the kernel has run each of them (its state is R when it runs or
        // waits for a core); a loop that never blocks stays R.
        for child in &hogs.0 {
            let stat = format!("/proc/{}/stat", child.id());
            let mut tries = 0;
            while !std::fs::read_to_string(&stat).is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('R')
            }) {
                tries += 1;
                assert!(tries < 500, "busy loop {} never ran", child.id());
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        assert_eq!(threads_free_now(runtime.threads()), 1);
        one_product(&runtime);
        let threads = runtime.cpu_threads().unwrap();
        assert_eq!(
            threads.last(),
            1,
            "{cpus} busy loops, yet the graph ran on {} of {} threads",
            threads.last(),
            runtime.threads()
        );
        drop(hogs);
    }

    #[test]
    fn the_guard_refuses_a_named_backend_and_sends_best_to_the_cpu() {
        assert_eq!(guard_outcome(BackendKind::Hip, None), GuardOutcome::Proceed);
        assert_eq!(
            guard_outcome(BackendKind::Best, None),
            GuardOutcome::Proceed
        );
        let line = "ROCm0 (AMD Radeon 780M) is gfx1103, and package p has no hipblaslt kernels";
        assert_eq!(
            guard_outcome(BackendKind::Hip, Some(line.into())),
            GuardOutcome::Refuse(line.into())
        );
        assert_eq!(
            guard_outcome(BackendKind::Best, Some(line.into())),
            GuardOutcome::UseCpu(line.into())
        );
    }

    #[test]
    fn hidden_cpu_type_vulkan_devices_are_named_with_how_to_show_them() {
        let one = HiddenVulkanDevices::new(&[VulkanPhysicalDevice {
            index: 0,
            name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            cpu_type: true,
        }]);
        assert!(
            one.reason
                .contains("the only Vulkan device here is of CPU type")
                && one
                    .reason
                    .ends_with("llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan device 0)"),
            "{}",
            one.reason
        );
        assert!(
            one.show
                .starts_with("set the environment variable GGML_VK_VISIBLE_DEVICES=0 to use it"),
            "{}",
            one.show
        );
        let listed = one.listing();
        assert_eq!(listed.backend, "vulkan");
        assert!(listed.advice.ends_with("or set parameter 'backend' to cpu"));
        let two = HiddenVulkanDevices::new(&[
            VulkanPhysicalDevice {
                index: 1,
                name: "llvmpipe".into(),
                cpu_type: true,
            },
            VulkanPhysicalDevice {
                index: 3,
                name: "SwiftShader Device".into(),
                cpu_type: true,
            },
        ]);
        assert!(two.reason.contains("devices here are of CPU type"));
        assert!(two.show.contains("GGML_VK_VISIBLE_DEVICES=1,3 to use them"));
    }

    #[test]
    fn best_warns_once_naming_every_gpu_backend_that_could_not_start() {
        assert_eq!(best_fallback_warning(&[]), None);
        let vk = UnloadableBackend {
            backend: "vulkan".into(),
            file: "ggml-vulkan.dll".into(),
            reason:
                "vkCreateInstance failed (ERROR_INITIALIZATION_FAILED): no Vulkan driver answered"
                    .into(),
            advice: VULKAN_DRIVER_ADVICE.into(),
        };
        let hip = UnloadableBackend {
            backend: "hip".into(),
            file: "ggml-hip.dll".into(),
            reason: String::new(),
            advice: String::new(),
        };
        let w = best_fallback_warning(std::slice::from_ref(&vk)).unwrap();
        assert_eq!(
            w,
            "the Vulkan backend (ggml-vulkan.dll) could not start: vkCreateInstance failed (ERROR_INITIALIZATION_FAILED): no Vulkan driver answered; parameter 'backend' best runs on the CPU instead"
        );
        let w = best_fallback_warning(&[hip, vk]).unwrap();
        assert!(w.starts_with("the HIP backend (ggml-hip.dll) could not start; the Vulkan"));
        assert_eq!(w.lines().count(), 1);
    }

    #[test]
    fn an_unloadable_backend_names_what_the_package_was_built_without_until_it_is_copied_in() {
        let dir = tempfile::tempdir().unwrap();
        let absent = [
            "libhipblaslt.dll".to_string(),
            "hipblaslt/library/".to_string(),
        ];
        let advice = not_loadable_advice(&absent, dir.path());
        assert!(
            advice.contains("built without libhipblaslt.dll and hipblaslt/library/"),
            "{advice}"
        );
        assert!(
            advice.contains("set parameter 'backend' to cpu"),
            "{advice}"
        );
        std::fs::create_dir_all(dir.path().join("hipblaslt/library")).unwrap();
        let advice = not_loadable_advice(&absent, dir.path());
        assert!(
            advice.contains("built without libhipblaslt.dll,"),
            "{advice}"
        );
        std::fs::write(dir.path().join("libhipblaslt.dll"), b"").unwrap();
        let advice = not_loadable_advice(&absent, dir.path());
        assert!(
            advice.starts_with("a library it needs is missing"),
            "{advice}"
        );
        assert_eq!(not_loadable_advice(&[], dir.path()), advice);
    }
}
