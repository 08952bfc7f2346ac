//! The listings that need no model: `--list-devices` (the build's backends, devices, CPU
//! kernels and the backend libraries that do not load) and `--list-loaders` (the model
//! families). `--list-voices` needs a model and lives with `--task tts`.

use audiocpp_engine::backend;
use audiocpp_engine::families;

use crate::flags::flag_of;
use crate::print::{self, out};
use crate::Failure;

/// `--list-devices`.
pub fn devices(json: bool) -> Result<(), Failure> {
    let mut unloadable = backend::unloadable_backends();
    for u in &mut unloadable {
        u.advice = audiocpp_engine::error::spell_parameters(&u.advice, &flag_of);
    }
    let devices = backend::list_devices();
    if json {
        return print::json(&serde_json::json!({
            "compiled_backends": backend::compiled_backends(),
            "cpu_kernels": backend::cpu_kernels(),
            "devices": devices,
            "unloadable_backends": unloadable,
        }));
    }
    out!(
        "compiled_backends={}",
        backend::compiled_backends().join(",")
    );
    out!("cpu_kernels={}", backend::cpu_kernels());
    out!("devices={}", devices.len());
    for d in &devices {
        out!(
            "device.{}.{}={} | {} | {} | free_mib={} | total_mib={}",
            d.backend,
            d.index,
            d.name,
            d.description,
            d.kind,
            d.memory_free / (1 << 20),
            d.memory_total / (1 << 20)
        );
    }
    for u in &unloadable {
        out!(
            "unloadable.{}={} | {} | {}",
            u.backend,
            u.file,
            if u.reason.is_empty() {
                "the loader gave no reason"
            } else {
                &u.reason
            },
            u.advice
        );
    }
    Ok(())
}

/// `--list-loaders`.
pub fn loaders(json: bool) -> Result<(), Failure> {
    let loaders: Vec<_> = families::all_loaders().collect();
    if json {
        return print::json(&loaders);
    }
    for l in loaders {
        out!(
            "loader={} tasks={} formats={} | {}",
            l.family,
            l.tasks
                .iter()
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(","),
            l.formats.join(","),
            l.description
        );
    }
    Ok(())
}
