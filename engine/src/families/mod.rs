//! Model families, one module each, and their registry ([`FAMILIES`]): one [`Family`]
//! entry per family holding what it is ([`LoaderInfo`], which `--list-loaders` prints),
//! the legacy containers it reads ([`LegacyFormat`], looked up by magic here, so
//! [`crate::model_file`] knows no family), its converter to GGUF ([`Converter`]) and
//! what it loads for each task it runs: a [`SpeechDetector`] for VAD, a [`Recognizer`]
//! for ASR, a [`Synthesizer`] for TTS. Those contracts live below the registry, in the
//! task modules ([`crate::vad`], [`crate::asr`], [`crate::tts`]); a family imports them
//! and nothing above itself. [`crate::tasks`] runs every task through these entries and
//! names no family.
//!
//! A new family is a folder here (its `FAMILY` entry, which compiles in its model spec
//! `model_specs/<family>.json`, and the contracts it implements) and one line in
//! [`FAMILIES`]; `README.md` in this folder is the skeleton to copy.
//!
//! The test-only family [`test_tone`] is compiled into this crate's own tests and, through
//! the cargo feature `test-families`, into the CLI's and server's tests (their
//! dev-dependency turns it on); release and `dist` builds never carry it, and a
//! `deployment` build with it does not compile.

#[cfg(all(feature = "deployment", feature = "test-families"))]
compile_error!(
    "the test-only families (feature `test-families`) must not be in a deployment build"
);

pub mod kokoro;
pub mod qwen3_tts;
pub mod silero_vad;
#[cfg(any(test, feature = "test-families"))]
pub mod test_tone;
pub mod whisper;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::asr::Recognizer;
use crate::backend::Runtime;
use crate::error::{EngineError, Result};
use crate::ggml::{GgufValue, HostTensor};
pub use crate::model_file::LegacyFormat;
use crate::model_file::{ModelFile, SourceFormat, GGUF_FAMILY_KEY};
use crate::spec::{self, ModelSpec, SpecSource};
use crate::task::{self, Task};
use crate::tts::Synthesizer;
use crate::vad::SpeechDetector;

/// What a family loader accepts, for `--list-loaders`.
#[derive(Debug, Clone, Serialize)]
pub struct LoaderInfo {
    /// Family name (`--family`).
    pub family: &'static str,
    /// Tasks it runs (`--task`); [`Family`]'s loaders must match it (a test checks).
    pub tasks: &'static [Task],
    /// Weight formats it reads.
    pub formats: &'static [&'static str],
    /// One line about it.
    pub description: &'static str,
}

/// Loads a family's model for one task from a read model file and its spec; it takes
/// the file, so that it can upload each weight and drop its host copy.
pub type Loader<T> = fn(ModelFile, &ModelSpec, Runtime) -> Result<Box<T>>;

/// Loads a family's voice-activity detector.
pub type VadLoader = Loader<dyn SpeechDetector>;

/// Loads a family's speech recognizer.
pub type AsrLoader = Loader<dyn Recognizer>;

/// Loads a family's speech synthesizer.
pub type TtsLoader = Loader<dyn Synthesizer>;

/// What a conversion is asked for, beyond the family: the engine's parameters
/// `model`, `model_spec_override`, `quantize` and the family's further `sources`.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// How matrix weights are stored (parameter `quantize`: the family's names, e.g.
    /// Whisper's `q8_0`, Kokoro's `f16`); `None` for the family's default.
    pub quantize: Option<String>,
    /// Further source files or folders by parameter name (Kokoro's `voices`, `vocab`,
    /// `lexicons`); a family refuses a name it does not take.
    pub sources: Vec<(String, PathBuf)>,
}

impl ConvertOptions {
    /// The source given as parameter `name`, if any.
    pub fn source(&self, name: &str) -> Option<&Path> {
        self.sources
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.as_path())
    }

    /// Refuses every source whose name is not in `accepted` (naming the parameter).
    pub fn only_sources(&self, family: &str, accepted: &[&str]) -> Result<()> {
        match self
            .sources
            .iter()
            .find(|(n, _)| !accepted.contains(&n.as_str()))
        {
            None => Ok(()),
            Some((n, _)) => Err(EngineError::Usage(format!(
                "parameter '{n}' is not a source of family '{family}' (it takes: {})",
                if accepted.is_empty() {
                    "none".to_string()
                } else {
                    accepted.join(", ")
                }
            ))),
        }
    }
}

/// What a family's converter produced: the spec to embed, then the GGUF's contents
/// less the `audiocpp.*` keys `tasks::convert` adds.
pub struct Conversion {
    /// The spec the conversion used, embedded in the GGUF.
    pub spec: ModelSpec,
    /// Container description for `audiocpp.source_format`.
    pub source_format: String,
    /// The family's metadata (hyper-parameters, vocabularies).
    pub metadata: Vec<(String, GgufValue)>,
    /// The tensors to write.
    pub tensors: Vec<HostTensor>,
}

/// Converts a family's source model (`model`, with `model_spec_override` if given) to
/// GGUF contents.
pub type Converter = fn(&Path, Option<&Path>, &ConvertOptions) -> Result<Conversion>;

/// One family: what it is and everything it does.
pub struct Family {
    /// Name, tasks, formats, description.
    pub info: LoaderInfo,
    /// Its model spec (`model_specs/<family>.json`) compiled in, which `deployment`
    /// builds resolve to when neither an override nor the GGUF gives one; `None` for a
    /// family whose spec always comes from elsewhere (the test-only family's).
    pub spec: Option<&'static str>,
    /// The legacy containers its files may come in (picked by magic).
    pub legacy: &'static [LegacyFormat],
    /// The released formats its converter reads and its loaders do not: given one to
    /// run, [`read_model`] says to convert it with this family first.
    pub sources: &'static [SourceFormat],
    /// `--task convert`.
    pub convert: Option<Converter>,
    /// `--task vad`.
    pub vad: Option<VadLoader>,
    /// `--task asr`.
    pub asr: Option<AsrLoader>,
    /// `--task tts`.
    pub tts: Option<TtsLoader>,
}

impl Family {
    /// True when it has a loader (or converter) for `task`.
    pub fn does(&self, task: Task) -> bool {
        match task {
            Task::Vad => self.vad.is_some(),
            Task::Asr => self.asr.is_some(),
            Task::Tts => self.tts.is_some(),
            Task::Convert => self.convert.is_some(),
        }
    }

    /// [`Family::does`] or the error naming the tasks it does.
    pub fn check_task(&self, task: Task) -> Result<()> {
        if self.does(task) {
            return Ok(());
        }
        Err(EngineError::WrongTask {
            family: self.info.family.into(),
            task: task.name().into(),
            supported: task::names(self.info.tasks),
        })
    }

    /// Reads `model` and resolves its spec (the override, the one the file embeds, this
    /// family's), checking that a file naming its family names this one.
    pub fn resolve_model(
        &self,
        model: &Path,
        spec_override: Option<&Path>,
    ) -> Result<ResolvedModel> {
        let family = self.info.family;
        let file = read_model(model)?;
        if let Some(f) = &file.family {
            if f != family {
                return Err(EngineError::Usage(format!(
                    "'{}' is a '{f}' model, not '{family}' (set parameter 'family' to {f})",
                    model.display()
                )));
            }
        }
        let (spec, spec_source) = spec::resolve_for_model(
            family,
            self.spec,
            model,
            file.meta_str(spec::GGUF_SPEC_KEY),
            spec_override,
        )?;
        Ok(ResolvedModel {
            file,
            spec,
            spec_source,
        })
    }

    /// The spec for converting a source model of this family that carries none
    /// ([`spec::resolve_source_spec`]).
    pub fn source_spec(&self, model: &Path, spec_override: Option<&Path>) -> Result<ModelSpec> {
        spec::resolve_source_spec(self.info.family, self.spec, model, spec_override)
    }
}

/// A model file with its resolved spec.
pub struct ResolvedModel {
    /// The parsed file.
    pub file: ModelFile,
    /// Its spec.
    pub spec: ModelSpec,
    /// Where the spec came from.
    pub spec_source: SpecSource,
}

/// A task contract as the registry knows it: its task, the family's loader for it and
/// where a loaded model runs. `tasks::Loaded::load` is generic over it.
pub trait TaskEntry {
    /// The task.
    const TASK: Task;
    /// The family's loader for the task, if it has one.
    fn loader(family: &Family) -> Option<Loader<Self>>;
    /// The device a loaded model runs on.
    fn device_of(model: &Self) -> String;
}

impl TaskEntry for dyn SpeechDetector {
    const TASK: Task = Task::Vad;
    fn loader(family: &Family) -> Option<Loader<Self>> {
        family.vad
    }
    fn device_of(model: &Self) -> String {
        model.device()
    }
}

impl TaskEntry for dyn Recognizer {
    const TASK: Task = Task::Asr;
    fn loader(family: &Family) -> Option<Loader<Self>> {
        family.asr
    }
    fn device_of(model: &Self) -> String {
        model.device()
    }
}

impl TaskEntry for dyn Synthesizer {
    const TASK: Task = Task::Tts;
    fn loader(family: &Family) -> Option<Loader<Self>> {
        family.tts
    }
    fn device_of(model: &Self) -> String {
        model.device()
    }
}

/// Every family this build ships.
pub const FAMILIES: &[Family] = &[
    silero_vad::FAMILY,
    whisper::FAMILY,
    kokoro::FAMILY,
    qwen3_tts::FAMILY,
];

/// The test-only families (test builds only).
#[cfg(any(test, feature = "test-families"))]
const TEST_ONLY: &[Family] = &[test_tone::FAMILY];
/// No test-only family outside test builds.
#[cfg(not(any(test, feature = "test-families")))]
const TEST_ONLY: &[Family] = &[];

/// Every family this build loads: [`FAMILIES`] and, in test builds, the test-only ones.
pub fn all_families() -> impl Iterator<Item = &'static Family> {
    FAMILIES.iter().chain(TEST_ONLY)
}

/// What every family of this build accepts (what `--list-loaders` prints, so a build's
/// listing shows whether it carries the test-only families).
pub fn all_loaders() -> impl Iterator<Item = &'static LoaderInfo> {
    all_families().map(|f| &f.info)
}

/// The family of that name, or an error listing the shipped ones.
pub fn find(family: &str) -> Result<&'static Family> {
    all_families()
        .find(|f| f.info.family == family)
        .ok_or_else(|| EngineError::UnknownFamily {
            family: family.to_string(),
            known: FAMILIES
                .iter()
                .map(|f| f.info.family)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Reads a model file of any format a family of this build reads. A model in a format
/// families only convert from ([`SourceFormat`]: a CTranslate2 folder, an ONNX file, a
/// Hugging Face folder) is refused with the conversion that makes it loadable.
pub fn read_model(path: &Path) -> Result<ModelFile> {
    crate::model_file::read(path, legacy_format).map_err(|e| match SourceFormat::of(path) {
        Some(source) => convert_first(path, source),
        None => e,
    })
}

/// The error for a model in `source` format given to a task that loads models.
fn convert_first(path: &Path, source: SourceFormat) -> EngineError {
    let families: Vec<String> = all_families()
        .filter(|f| f.sources.contains(&source))
        .map(|f| format!("family '{}'", f.info.family))
        .collect();
    let with = if families.is_empty() {
        "no family of this build converts it".to_string()
    } else {
        format!(
            "convert it to GGUF first (task 'convert', {}) and give the .gguf it writes as parameter 'model'",
            families.join(" or ")
        )
    };
    EngineError::Usage(format!(
        "'{}' is {}, which is converted, not loaded: {with}",
        path.display(),
        source.name()
    ))
}

/// The family a model file names of itself (a GGUF made by task 'convert' records it
/// under `audiocpp.family`; a legacy container's magic names it), so that a front end
/// may make parameter 'family' optional. Reads the header and metadata only, not the
/// tensor data. An error says why it cannot tell: a GGUF that names no family (set
/// parameter 'family'), a family this build lacks, a model to convert first, a file
/// that is no model.
pub fn family_of_model(path: &Path) -> Result<&'static Family> {
    let bad = |reason: String| EngineError::Model {
        path: path.to_path_buf(),
        reason,
    };
    let named = if crate::model_file::is_gguf(path)? {
        let metadata = crate::model_file::read_gguf_metadata(path)?;
        metadata.into_iter().find_map(|(k, v)| match v {
            GgufValue::Str(s) if k == GGUF_FAMILY_KEY => Some(s),
            _ => None,
        })
    } else {
        let mut magic = [0u8; 4];
        {
            use std::io::Read;
            let mut f = std::fs::File::open(path).map_err(|source| EngineError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let _ = f.read_exact(&mut magic);
        }
        match (legacy_format(&magic), SourceFormat::of(path)) {
            (Some((family, _)), _) => Some(family.to_string()),
            (None, Some(source)) => return Err(convert_first(path, source)),
            (None, None) => return Err(bad(
                "unknown format (expected GGUF or a ggml .bin; first bytes are not a known magic)"
                    .into(),
            )),
        }
    };
    let named = named.ok_or_else(|| {
        EngineError::Usage(format!(
            "'{}' does not say which family it is (no '{GGUF_FAMILY_KEY}' key): set parameter 'family'",
            path.display()
        ))
    })?;
    find(&named)
}

/// The legacy container whose magic `bytes` start with, and the family that reads it.
pub fn legacy_format(bytes: &[u8]) -> Option<(&'static str, &'static LegacyFormat)> {
    all_families().find_map(|f| {
        f.legacy
            .iter()
            .find(|l| bytes.get(..4) == Some(&l.magic[..]))
            .map(|l| (f.info.family, l))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_task_has_its_loader_and_no_other() {
        for f in all_families() {
            for task in Task::ALL {
                assert_eq!(
                    f.info.tasks.contains(&task),
                    f.does(task),
                    "family '{}' task '{task}': its LoaderInfo and its loaders disagree",
                    f.info.family
                );
            }
            for &task in f.info.tasks {
                assert!(
                    f.does(task),
                    "{}: no loader for task '{task}'",
                    f.info.family
                );
            }
        }
    }

    #[test]
    fn every_shipped_family_compiles_in_its_own_valid_spec() {
        for f in FAMILIES {
            let name = f.info.family;
            let json = f
                .spec
                .unwrap_or_else(|| panic!("family '{name}' ships no spec"));
            let spec = ModelSpec::parse(json, name).unwrap();
            assert_eq!(spec.family, name);
            assert!(
                f.info.tasks.contains(&spec.task),
                "family '{name}': spec task '{}' is not one of {:?}",
                spec.task,
                f.info.tasks
            );
        }
    }

    #[test]
    fn names_and_magics_are_unique() {
        let names: Vec<_> = all_loaders().map(|l| l.family).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "{names:?}");
        let magics: Vec<_> = all_families()
            .flat_map(|f| f.legacy.iter().map(|l| l.magic))
            .collect();
        let mut m = magics.clone();
        m.sort_unstable();
        m.dedup();
        assert_eq!(m.len(), magics.len());
        assert_eq!(
            legacy_format(b"lmgg....").map(|(f, _)| f),
            Some("silero_vad")
        );
        assert!(legacy_format(b"GGUF").is_none());
    }

    #[test]
    fn unknown_family_lists_the_known_ones() {
        let err = find("nope").err().unwrap().to_string();
        assert!(
            err.contains("silero_vad, whisper, kokoro, qwen3_tts"),
            "{err}"
        );
    }
}
