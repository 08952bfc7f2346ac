//! `--task info`: loads a model as its task would and prints what it is (family, file
//! format, spec source, device, tensor sizes, hyper-parameters).

use std::path::Path;

use audiocpp_engine::tasks;

use crate::flags::Flags;
use crate::print::{self, out};
use crate::Failure;

/// Loads `model` of `family` and describes it.
pub fn run(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    let opts = flags.runtime.options()?;
    let spec = flags.runtime.model_spec_override.as_deref();
    let info = tasks::info(family, model, spec, &opts)?;
    if flags.json {
        return print::json(&info);
    }
    out!(
        "task=info\nfamily={}\nloaded_for={}\nformat={}\nspec_source={}\ndevice={}\ntensors={}\ntensor_bytes={}\nlargest_tensor_bytes={}",
        info.family,
        info.task,
        info.format,
        info.spec_source,
        info.device,
        info.tensors,
        info.tensor_bytes,
        info.largest_tensor_bytes
    );
    for (key, value) in &info.hyper_parameters {
        out!("{key}={value}");
    }
    Ok(())
}
