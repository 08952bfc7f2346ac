//! Model specs: what a family's model looks like (tensors, shapes, hyper-parameters the
//! weights do not carry, default parameters), one JSON file per family in `model_specs/`.
//!
//! Resolution order, first hit wins: `--model-spec-override` (file or directory), the
//! spec embedded in a GGUF's metadata, the family's spec compiled into the binary (its
//! registry entry's `Family::spec`, given by the caller; consulted in builds with the cargo
//! feature `deployment`, so that a development build reads the edited file on disk),
//! then on-disk search next to the model and upward from the working directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::model_file::ModelFile;
use crate::task::Task;

/// GGUF metadata key holding the model spec JSON.
pub const GGUF_SPEC_KEY: &str = "audiocpp.model_spec";

/// A family's model description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Family name, e.g. `silero_vad`.
    pub family: String,
    /// Task the family performs.
    pub task: Task,
    /// One line for `--list-loaders`.
    pub description: String,
    /// Sample rate the model consumes.
    pub sample_rate: u32,
    /// Hyper-parameters the weight file does not carry.
    #[serde(default)]
    pub hparams: BTreeMap<String, serde_json::Value>,
    /// Expected tensors with dims in ggml order (`ne[0]` first).
    pub tensors: BTreeMap<String, Vec<i64>>,
    /// Default run parameters.
    #[serde(default)]
    pub defaults: BTreeMap<String, serde_json::Value>,
}

/// Dims without trailing ones (a `[n, 1]` tensor is `[n]`).
fn squeeze(ne: &[i64]) -> &[i64] {
    // A scalar (no dims, as legacy files store a 1-element bias) is the shape [1].
    if ne.is_empty() {
        return &[1];
    }
    let mut end = ne.len();
    while end > 1 && ne[end - 1] == 1 {
        end -= 1;
    }
    &ne[..end]
}

impl ModelSpec {
    /// Checks that `file` has every tensor the spec lists, with the listed dims (ggml
    /// order; a 0 is any size, trailing ones ignored). A `{i}` in a name stands for
    /// every index below `repeat(name)` (a stack's layer count, which the family reads
    /// from its hyper-parameters).
    pub fn check_tensors(&self, file: &ModelFile, repeat: &dyn Fn(&str) -> usize) -> Result<()> {
        let bad = |reason: String| EngineError::Model {
            path: file.path.clone(),
            reason,
        };
        for (pattern, want) in &self.tensors {
            let names: Vec<String> = if pattern.contains("{i}") {
                (0..repeat(pattern))
                    .map(|i| pattern.replace("{i}", &i.to_string()))
                    .collect()
            } else {
                vec![pattern.clone()]
            };
            for name in names {
                let t = file.tensor(&name).ok_or_else(|| {
                    bad(format!(
                        "tensor '{name}' is missing (is this a {} model?)",
                        self.family
                    ))
                })?;
                let (have, want) = (squeeze(&t.ne), squeeze(want));
                let fits = have.len() == want.len()
                    && have.iter().zip(want).all(|(&h, &w)| w == 0 || h == w);
                if !fits {
                    return Err(bad(format!(
                        "tensor '{name}' has shape {:?}, the {} spec expects {want:?}",
                        t.ne, self.family
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Where a resolved spec came from (printed by the CLI as `spec_source=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecSource {
    /// `--model-spec-override`.
    Override(PathBuf),
    /// Embedded in the GGUF file.
    GgufMetadata,
    /// Compiled into the binary.
    Embedded,
    /// Found on disk.
    Disk(PathBuf),
}

impl std::fmt::Display for SpecSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecSource::Override(p) => write!(f, "override:{}", p.display()),
            SpecSource::GgufMetadata => write!(f, "gguf-metadata"),
            SpecSource::Embedded => write!(f, "embedded"),
            SpecSource::Disk(p) => write!(f, "disk:{}", p.display()),
        }
    }
}

impl ModelSpec {
    /// Parses and validates a spec; `origin` names it in errors.
    pub fn parse(json: &str, origin: &str) -> Result<Self> {
        let spec: ModelSpec = serde_json::from_str(json).map_err(|e| EngineError::BadSpec {
            origin: origin.to_string(),
            reason: e.to_string(),
        })?;
        if spec.tensors.is_empty() || spec.sample_rate == 0 {
            return Err(EngineError::BadSpec {
                origin: origin.to_string(),
                reason: "a spec needs a sample_rate and at least one tensor".into(),
            });
        }
        Ok(spec)
    }

    /// An integer hyper-parameter, or a spec error naming it.
    pub fn hparam_i64(&self, key: &str) -> Result<i64> {
        self.hparams
            .get(key)
            .and_then(serde_json::Value::as_i64)
            .ok_or_else(|| self.missing(key))
    }

    /// A list-of-integers hyper-parameter.
    pub fn hparam_i64_list(&self, key: &str) -> Result<Vec<i64>> {
        self.hparams
            .get(key)
            .and_then(serde_json::Value::as_array)
            .and_then(|a| a.iter().map(serde_json::Value::as_i64).collect())
            .ok_or_else(|| self.missing(key))
    }

    /// A numeric default (None when absent or null).
    pub fn default_f64(&self, key: &str) -> Option<f64> {
        self.defaults.get(key).and_then(serde_json::Value::as_f64)
    }

    fn missing(&self, key: &str) -> EngineError {
        EngineError::BadSpec {
            origin: self.family.clone(),
            reason: format!("hparam '{key}' is missing or has the wrong type"),
        }
    }

    /// Serialises the spec for embedding in a GGUF.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("spec serialises")
    }
}

/// Inputs to spec resolution.
#[derive(Debug, Clone, Default)]
pub struct SpecQuery<'a> {
    /// Family asked for.
    pub family: &'a str,
    /// `--model-spec-override`, a file or a directory holding `<family>.json`.
    pub override_path: Option<&'a Path>,
    /// Spec JSON embedded in the model file, if any.
    pub embedded_in_model: Option<&'a str>,
    /// The family's spec JSON compiled into the binary (its registry entry's), used in
    /// `deployment` builds only.
    pub compiled_in: Option<&'a str>,
    /// The model file (its folder is searched).
    pub model_path: Option<&'a Path>,
    /// Working directory to search upward from.
    pub cwd: Option<&'a Path>,
}

/// The spec for a model file already read: the override, else the one the file
/// embeds, else the family's compiled-in one (`compiled_in`) or one beside the model.
pub fn resolve_for_model(
    family: &str,
    compiled_in: Option<&str>,
    model: &Path,
    embedded_in_model: Option<&str>,
    spec_override: Option<&Path>,
) -> Result<(ModelSpec, SpecSource)> {
    let cwd = std::env::current_dir().ok();
    resolve(&SpecQuery {
        family,
        override_path: spec_override,
        embedded_in_model,
        compiled_in,
        model_path: Some(model),
        cwd: cwd.as_deref(),
    })
}

/// The spec for converting a source model that carries none (a CTranslate2 or ONNX
/// model): the override, else the family's compiled-in one or one beside the model.
pub fn resolve_source_spec(
    family: &str,
    compiled_in: Option<&str>,
    model: &Path,
    spec_override: Option<&Path>,
) -> Result<ModelSpec> {
    resolve_for_model(family, compiled_in, model, None, spec_override).map(|(spec, _)| spec)
}

fn read_spec(path: &Path) -> Result<ModelSpec> {
    let text = std::fs::read_to_string(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    ModelSpec::parse(&text, &path.display().to_string())
}

/// Finds the spec for a family, trying each source in order; the miss names every
/// place searched and every remedy.
pub fn resolve(q: &SpecQuery<'_>) -> Result<(ModelSpec, SpecSource)> {
    let file_name = format!("{}.json", q.family);
    let mut searched = Vec::new();
    let check_family = |spec: ModelSpec, source: SpecSource| -> Result<(ModelSpec, SpecSource)> {
        if spec.family != q.family {
            return Err(EngineError::BadSpec {
                origin: source.to_string(),
                reason: format!("it describes family '{}', not '{}'", spec.family, q.family),
            });
        }
        Ok((spec, source))
    };

    if let Some(p) = q.override_path {
        let file = if p.is_dir() {
            p.join(&file_name)
        } else {
            p.to_path_buf()
        };
        if !file.is_file() {
            return Err(EngineError::Usage(format!(
                "parameter 'model_spec_override' '{}' does not exist (expected a spec file or a folder holding {file_name})",
                p.display()
            )));
        }
        return check_family(read_spec(&file)?, SpecSource::Override(file));
    }
    searched.push("parameter 'model_spec_override' (not given)".to_string());

    if let Some(json) = q.embedded_in_model {
        let spec = ModelSpec::parse(json, "GGUF metadata")?;
        return check_family(spec, SpecSource::GgufMetadata);
    }
    searched.push("model metadata (none)".to_string());

    match q.compiled_in {
        Some(json) if cfg!(feature = "deployment") => {
            return check_family(
                ModelSpec::parse(json, "embedded catalog")?,
                SpecSource::Embedded,
            );
        }
        Some(_) => searched.push("embedded catalog (not in this build)".to_string()),
        None => searched.push("embedded catalog (none for this family)".to_string()),
    }

    let mut candidates = Vec::new();
    if let Some(dir) = q.model_path.and_then(Path::parent) {
        candidates.push(dir.join("model_specs").join(&file_name));
        candidates.push(dir.join(&file_name));
    }
    if let Some(cwd) = q.cwd {
        for dir in cwd.ancestors() {
            candidates.push(dir.join("model_specs").join(&file_name));
        }
    }
    for file in candidates {
        if file.is_file() {
            return check_family(read_spec(&file)?, SpecSource::Disk(file));
        }
        searched.push(file.display().to_string());
    }
    Err(EngineError::SpecNotFound {
        family: q.family.to_string(),
        searched: searched.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = include_str!("../../model_specs/silero_vad.json");

    fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A temporary folder, removed when the returned guard drops.
    fn tmp() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        (dir, path)
    }

    #[test]
    fn a_scalar_is_a_one_element_shape_and_trailing_ones_are_ignored() {
        assert_eq!(squeeze(&[]), &[1]);
        assert_eq!(squeeze(&[1]), &[1]);
        assert_eq!(squeeze(&[4, 1, 1]), &[4]);
        assert_eq!(squeeze(&[1, 4]), &[1, 4]);
    }

    #[test]
    fn override_beats_metadata_and_disk() {
        let (_dir, d) = tmp();
        let over = write(&d, "over/silero_vad.json", SPEC);
        let (_, src) = resolve(&SpecQuery {
            family: "silero_vad",
            override_path: Some(&d.join("over")),
            embedded_in_model: Some(SPEC),
            compiled_in: Some(SPEC),
            model_path: None,
            cwd: Some(&d),
        })
        .unwrap();
        assert_eq!(src, SpecSource::Override(over));
    }

    #[test]
    fn metadata_beats_compiled_in_and_disk() {
        let (_dir, d) = tmp();
        write(&d, "model_specs/silero_vad.json", SPEC);
        let (_, src) = resolve(&SpecQuery {
            family: "silero_vad",
            embedded_in_model: Some(SPEC),
            compiled_in: Some(SPEC),
            cwd: Some(&d),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(src, SpecSource::GgufMetadata);
    }

    #[test]
    fn disk_search_finds_next_to_model_then_upward() {
        let (_dir, d) = tmp();
        let model = write(&d, "models/m.bin", "x");
        let next = write(&d, "models/silero_vad.json", SPEC);
        let up = write(&d, "model_specs/silero_vad.json", SPEC);
        let deep = d.join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        let q = SpecQuery {
            family: "silero_vad",
            model_path: Some(&model),
            cwd: Some(&deep),
            ..Default::default()
        };
        assert_eq!(resolve(&q).unwrap().1, SpecSource::Disk(next.clone()));
        std::fs::remove_file(&next).unwrap();
        assert_eq!(resolve(&q).unwrap().1, SpecSource::Disk(up));
    }

    #[test]
    fn compiled_in_spec_is_used_by_deployment_builds_only() {
        let (_dir, d) = tmp();
        let on_disk = write(&d, "model_specs/silero_vad.json", SPEC);
        let q = SpecQuery {
            family: "silero_vad",
            compiled_in: Some(SPEC),
            cwd: Some(&d),
            ..Default::default()
        };
        let expected = if cfg!(feature = "deployment") {
            SpecSource::Embedded
        } else {
            SpecSource::Disk(on_disk)
        };
        assert_eq!(resolve(&q).unwrap().1, expected);
    }

    #[test]
    fn miss_names_every_remedy() {
        let (_dir, d) = tmp();
        let err = resolve(&SpecQuery {
            family: "nope",
            cwd: Some(&d),
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("model spec not found for family 'nope'"),
            "{err}"
        );
        for remedy in [
            "parameter 'model_spec_override'",
            "GGUF",
            "deployment",
            "model_specs/nope.json",
        ] {
            assert!(err.contains(remedy), "{remedy} missing in {err}");
        }
    }

    #[test]
    fn wrong_family_and_bad_json_are_errors() {
        let (_dir, d) = tmp();
        let f = write(&d, "x.json", SPEC);
        let e = resolve(&SpecQuery {
            family: "whisper",
            override_path: Some(&f),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("not 'whisper'"), "{e}");
        let bad = write(&d, "bad.json", "{\"family\": 3}");
        let e = resolve(&SpecQuery {
            family: "silero_vad",
            override_path: Some(&bad),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().starts_with("invalid model spec"), "{e}");
    }
}
