//! Task entry points the front ends call: load a family's model for a task, convert a
//! model, describe one.
//!
//! Every task runs through the family registry ([`crate::families::FAMILIES`]): loading
//! asks the family's entry for its loader for the task's contract
//! ([`crate::vad::SpeechDetector`], [`crate::asr::Recognizer`], [`crate::tts::Synthesizer`])
//! and wraps the model it returns in the one loaded-model type ([`Loaded`]; `VadModel`,
//! `AsrModel`, `TtsModel`), whose run methods live with their contracts. This is the
//! top of the engine: nothing below imports it, and no code here names a family.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::asr::AsrModel;
use crate::backend::{Runtime, RuntimeOptions};
use crate::error::{EngineError, Result};
use crate::families::{self, ConvertOptions, TaskEntry};
use crate::ggml::GgufValue;
use crate::loaded::Loaded;
use crate::model_file::GGUF_FAMILY_KEY;
use crate::spec::GGUF_SPEC_KEY;
use crate::task::Task;
use crate::tts::TtsModel;
use crate::vad::VadModel;

impl<T: ?Sized + TaskEntry> Loaded<T> {
    /// Loads a model of `family` for the task of contract `T` (a GGUF made by `--task
    /// convert`, or a legacy container the family reads) onto the device `opts` selects.
    pub fn load(
        family: &str,
        model: &Path,
        spec_override: Option<&Path>,
        opts: &RuntimeOptions,
    ) -> Result<Self> {
        let entry = families::find(family)?;
        entry.check_task(T::TASK)?;
        Self::from_resolved(entry, entry.resolve_model(model, spec_override)?, opts)
    }

    /// Loads a model already read and resolved with `entry`'s loader for the task.
    fn from_resolved(
        entry: &'static families::Family,
        resolved: families::ResolvedModel,
        opts: &RuntimeOptions,
    ) -> Result<Self> {
        let load = T::loader(entry).ok_or_else(|| wrong_task(entry, T::TASK))?;
        let runtime = Runtime::new(opts)?;
        let loaded = load(resolved.file, &resolved.spec, runtime)?;
        Ok(Loaded::new(loaded, entry.info.family, resolved.spec_source))
    }

    /// The device the model runs on.
    pub fn device(&self) -> String {
        T::device_of(&self.model)
    }
}

/// The error for a family asked for a task it has no loader for.
fn wrong_task(entry: &families::Family, task: Task) -> EngineError {
    EngineError::WrongTask {
        family: entry.info.family.into(),
        task: task.name().into(),
        supported: crate::task::names(entry.info.tasks),
    }
}

/// What a conversion wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ConvertOutput {
    /// The GGUF written.
    pub out: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Tensors written.
    pub tensors: usize,
}

/// Converts a model of a family to GGUF with the spec embedded, written through
/// [`crate::output`] (atomically for a regular file; nothing is left on failure). The
/// family's converter ([`families::Family::convert`]) reads the source (Silero VAD: a
/// ggml `.bin` or GGUF; Whisper: a CTranslate2 model; Kokoro: its ONNX with
/// `options.sources` voices, vocab, lexicons) and applies `options.quantize`.
pub fn convert(
    family: &str,
    model: &Path,
    spec_override: Option<&Path>,
    out: &Path,
    options: &ConvertOptions,
) -> Result<ConvertOutput> {
    let entry = families::find(family)?;
    entry.check_task(Task::Convert)?;
    let converter = entry
        .convert
        .ok_or_else(|| wrong_task(entry, Task::Convert))?;
    let c = converter(model, spec_override, options)?;
    let mut metadata: Vec<(String, GgufValue)> = vec![
        (
            GGUF_FAMILY_KEY.to_string(),
            GgufValue::Str(family.to_string()),
        ),
        (GGUF_SPEC_KEY.to_string(), GgufValue::Str(c.spec.to_json())),
        (
            "audiocpp.source_format".to_string(),
            GgufValue::Str(c.source_format),
        ),
    ];
    metadata.extend(
        c.metadata
            .into_iter()
            .filter(|(k, _)| !k.starts_with("audiocpp.") && !k.starts_with("general.alignment")),
    );
    let tensors = c.tensors;
    let bytes = crate::output::write_via_path(out, |tmp| {
        crate::ggml::write_gguf(tmp, &metadata, &tensors).map_err(|e| EngineError::Write {
            path: out.to_path_buf(),
            source: match e {
                crate::ggml::GgmlError::Write(source) => source,
                e => std::io::Error::other(e.to_string()),
            },
        })
    })?;
    Ok(ConvertOutput {
        out: out.to_path_buf(),
        bytes,
        tensors: tensors.len(),
    })
}

/// What `--task info` reports about a model, loaded onto the device as its family's
/// task loads it (so that a run measures what loading costs).
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// The family.
    pub family: String,
    /// The task it was loaded for.
    pub task: Task,
    /// The container (`gguf`, `ggml:...`).
    pub format: String,
    /// Where the spec came from (`embedded`, `gguf-metadata`, `disk:...`).
    pub spec_source: String,
    /// The device it was loaded onto.
    pub device: String,
    /// Tensors in the file.
    pub tensors: usize,
    /// Bytes of tensor data in the file.
    pub tensor_bytes: usize,
    /// Bytes of the largest tensor.
    pub largest_tensor_bytes: usize,
    /// The file's numeric metadata: the family's hyper-parameters (`whisper.n_mels`...),
    /// in file order.
    pub hyper_parameters: Vec<(String, serde_json::Value)>,
}

/// Loads a model for the first task its family runs (other than `convert`) and
/// describes it.
pub fn info(
    family: &str,
    model: &Path,
    spec_override: Option<&Path>,
    opts: &RuntimeOptions,
) -> Result<ModelInfo> {
    let entry = families::find(family)?;
    let task = entry
        .info
        .tasks
        .iter()
        .copied()
        .find(|t| t.runs_a_model())
        .unwrap_or(Task::Convert);
    entry.check_task(task)?;
    let resolved = entry.resolve_model(model, spec_override)?;
    let file = &resolved.file;
    let hyper_parameters = file
        .metadata
        .iter()
        .filter_map(|(k, v)| match v {
            GgufValue::U32(x) => Some((k.clone(), serde_json::Value::from(*x))),
            GgufValue::F32(x) => Some((k.clone(), serde_json::Value::from(*x))),
            _ => None,
        })
        .collect();
    let mut info = ModelInfo {
        family: family.to_string(),
        task,
        format: file.format.to_string(),
        spec_source: resolved.spec_source.to_string(),
        device: String::new(),
        tensors: file.tensors.len(),
        tensor_bytes: file.data_bytes(),
        largest_tensor_bytes: file.tensors.iter().map(|t| t.data.len()).max().unwrap_or(0),
        hyper_parameters,
    };
    info.device = match task {
        Task::Vad => VadModel::from_resolved(entry, resolved, opts)?.device(),
        Task::Asr => AsrModel::from_resolved(entry, resolved, opts)?.device(),
        Task::Tts => TtsModel::from_resolved(entry, resolved, opts)?.device(),
        Task::Convert => String::from("none (convert only)"),
    };
    Ok(info)
}
