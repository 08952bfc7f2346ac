//! `--task convert`: a released model (and the further sources its family names) to the
//! engine's GGUF. Which sources a family takes is the family's to say: the CLI passes
//! every `--source NAME=PATH` (and `--voices`, `--vocab`, `--lexicons`, the same by
//! their names) on, and the family refuses a name it does not take.

use std::path::Path;

use audiocpp_engine::families::ConvertOptions;
use audiocpp_engine::tasks;

use crate::flags::Flags;
use crate::print::{self, out};
use crate::{check_output, usage, Failure};

/// Converts `model` of `family` into `--out`.
pub fn run(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    let out = flags
        .out
        .as_deref()
        .ok_or_else(|| usage("--task convert needs --out FILE.gguf"))?;
    let options = ConvertOptions {
        quantize: flags.convert.quantize.clone(),
        sources: flags.convert.sources()?,
    };
    check_output("--out", Some(out))?;
    let spec = flags.runtime.model_spec_override.as_deref();
    let r = tasks::convert(family, model, spec, out, &options)?;
    if flags.json {
        return print::json(&r);
    }
    out!(
        "task=convert\nout={}\nbytes={}\ntensors={}",
        r.out.display(),
        r.bytes,
        r.tensors
    );
    Ok(())
}
