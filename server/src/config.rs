//! `server.json`: typed, validated, with paths resolved against the config's folder.

use std::path::{Path, PathBuf};

use audiocpp_engine::task::Task;
use serde::Deserialize;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address to bind (default 127.0.0.1: local only).
    #[serde(default = "default_host")]
    pub host: String,
    /// Port (0 picks a free one).
    #[serde(default = "default_port")]
    pub port: u32,
    /// Backend for every model: cpu, cuda, hip (rocm), vulkan, metal, best.
    #[serde(default = "default_backend")]
    pub backend: String,
    /// Device index among the backend's devices.
    #[serde(default)]
    pub device: Option<usize>,
    /// The most CPU threads per inference (0: all cores); on Linux each graph runs with
    /// only those that have a free core.
    #[serde(default)]
    pub threads: usize,
    /// The models served.
    pub models: Vec<ModelEntry>,
    /// How long a request waits for a busy model before 503 `server_busy`.
    #[serde(default = "default_busy_timeout_ms")]
    pub busy_timeout_ms: u64,
    /// Origins allowed by CORS; empty means no CORS headers at all.
    #[serde(default)]
    pub cors_origins: Vec<String>,
    /// Bearer token required on /v1 routes (also from AUDIOCPP_API_KEY).
    #[serde(default)]
    pub api_key: Option<String>,
    /// Largest request body accepted (413 above it).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Longest decoded audio accepted, in seconds (400 above it; checked from the
    /// header before decoding).
    #[serde(default = "default_max_audio_s")]
    pub max_audio_s: f64,
    /// Lowest audio sample rate accepted, in Hz (400 below it).
    #[serde(default = "default_min_sample_rate_hz")]
    pub min_sample_rate_hz: u32,
    /// Longest speech `POST /v1/audio/speech` makes, in seconds: synthesis stops once
    /// the audio passes it (400 before any audio was sent; a cut stream after).
    #[serde(default = "default_max_speech_s")]
    pub max_speech_s: f64,
    /// Most connections open at once; one more gets 503 and is closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Time a client has to send a complete request header; also how long an idle
    /// keep-alive connection stays open between requests.
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// Time a client has to send a whole request body (408 after it).
    #[serde(default = "default_body_timeout_ms")]
    pub body_timeout_ms: u64,
    /// Time connections still open get after SIGINT/SIGTERM before they are closed.
    #[serde(default = "default_shutdown_timeout_ms")]
    pub shutdown_timeout_ms: u64,
    /// Folder the voices API keeps cloned voices in (relative paths are relative to the
    /// config file's folder; made at start); none: no voices API.
    #[serde(default)]
    pub voices_dir: Option<PathBuf>,
    /// Most voices stored at once; one more upload is refused until one is deleted.
    #[serde(default = "default_max_voices")]
    pub max_voices: usize,
}

/// One served model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Name clients use in the `model` field.
    pub id: String,
    /// Model file (relative paths are relative to the config file's folder).
    pub path: PathBuf,
    /// Family (see `audiocpp_cli --list-loaders`).
    pub family: String,
    /// Task: `vad`, `asr` or `tts`.
    pub task: Task,
    /// Load on first request instead of at start.
    #[serde(default)]
    pub lazy: bool,
    /// Model spec file or folder, as `--model-spec-override`.
    #[serde(default)]
    pub model_spec_override: Option<PathBuf>,
    /// ASR models: a VAD model file (Silero); speech is found first and transcribed in
    /// chunks of up to 30 s that start and end in pauses, as `audiocpp_cli --vad-model`.
    #[serde(default)]
    pub vad_model: Option<PathBuf>,
    /// Family of `vad_model`.
    #[serde(default = "default_vad_family")]
    pub vad_family: String,
    /// Backend of `vad_model` (default cpu, as `audiocpp_cli --vad-backend`: Silero's
    /// tiny recurrent steps are slower through a GPU's kernel launches).
    #[serde(default = "default_vad_backend")]
    pub vad_backend: String,
    /// Requests the model runs at once, each on a worker of its own that shares the
    /// weights ([`ModelEntry::workers`]); absent: [`default_parallel`] for `asr`
    /// models, 1 for the others. `vad` models take only 1 (Silero does not fork); a
    /// `tts` family that does not fork (the test tone) serves with one worker and logs it.
    #[serde(default)]
    pub parallel: Option<usize>,
    /// `asr` models: requests waiting for the model are decoded together, up to this
    /// many in one batch on one worker ([`crate::batch`]); 1 (the default) runs each
    /// on a worker of its own. Each request's transcript is the one it gets alone on
    /// the CPU; docs/server.md gives what it saves where.
    #[serde(default = "default_batch")]
    pub batch: usize,
}

fn default_batch() -> usize {
    1
}

/// The most requests one batch decodes: each holds its own decoder caches.
pub const MAX_BATCH: usize = 32;

/// The most workers one model may have: each holds its own caches and compute buffers
/// (tens of MB for Whisper tiny, hundreds for large), so a typo such as 1000 is refused
/// at start instead of exhausting memory.
pub const MAX_PARALLEL: usize = 64;

/// The default `parallel` of an `asr` model: one worker per two cores of the thread
/// cap (`threads`, 0: all `cores`), at least 1 and at most 8. Whisper's decoder steps
/// are small graphs that keep few cores busy, so two requests on two cores each finish
/// sooner together than one after the other on four; more than 8 workers mostly adds
/// memory.
pub fn default_parallel(threads: usize, cores: usize) -> usize {
    let cores = if threads == 0 {
        cores
    } else {
        threads.min(cores)
    };
    (cores / 2).clamp(1, 8)
}

impl ModelEntry {
    /// The requests it runs at once: `parallel`, else its task's default (see
    /// [`default_parallel`]; `threads` is the config's thread cap).
    pub fn workers(&self, threads: usize) -> usize {
        self.parallel.unwrap_or_else(|| {
            if self.task == Task::Asr {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                default_parallel(threads, cores)
            } else {
                1
            }
        })
    }
}

fn default_vad_family() -> String {
    "silero_vad".into()
}

fn default_vad_backend() -> String {
    "cpu".into()
}

fn default_host() -> String {
    "127.0.0.1".into()
}
fn default_port() -> u32 {
    8080
}
fn default_backend() -> String {
    "cpu".into()
}
fn default_busy_timeout_ms() -> u64 {
    30_000
}
fn default_max_body_bytes() -> usize {
    64 << 20
}
fn default_max_connections() -> usize {
    256
}
fn default_header_timeout_ms() -> u64 {
    10_000
}
fn default_body_timeout_ms() -> u64 {
    60_000
}
fn default_shutdown_timeout_ms() -> u64 {
    60_000
}
fn default_max_voices() -> usize {
    100
}
fn default_max_audio_s() -> f64 {
    audiocpp_engine::audio::DEFAULT_MAX_AUDIO_S
}
fn default_max_speech_s() -> f64 {
    audiocpp_engine::tts::DEFAULT_MAX_SPEECH_S
}
fn default_min_sample_rate_hz() -> u32 {
    audiocpp_engine::audio::DEFAULT_MIN_SAMPLE_RATE_HZ
}

impl Config {
    /// Reads, parses and validates a config file; every error names the file and field.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config '{}': {e}", path.display()))?;
        let mut cfg: Config = serde_json::from_str(&text)
            .map_err(|e| format!("invalid config '{}': {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(d) = &mut cfg.voices_dir {
            if d.is_relative() {
                *d = base.join(&*d);
            }
        }
        for m in &mut cfg.models {
            if m.path.is_relative() {
                m.path = base.join(&m.path);
            }
            for p in [&mut m.model_spec_override, &mut m.vad_model]
                .into_iter()
                .flatten()
            {
                if p.is_relative() {
                    *p = base.join(&*p);
                }
            }
        }
        cfg.validate()
            .map_err(|e| format!("invalid config '{}': {e}", path.display()))?;
        Ok(cfg)
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), String> {
        if self.port > 65_535 {
            return Err(format!("port {} is out of range (0-65535)", self.port));
        }
        if self.models.is_empty() {
            return Err("models is empty: serve at least one model".into());
        }
        let mut ids = std::collections::BTreeSet::new();
        for m in &self.models {
            if !ids.insert(&m.id) {
                return Err(format!("model id '{}' is used twice", m.id));
            }
            let loader = audiocpp_engine::families::find(&m.family)
                .map_err(|e| format!("model '{}': {e}", m.id))?;
            if !m.task.runs_a_model() {
                return Err(format!(
                    "model '{}': task '{}' is not served (expected vad, asr or tts)",
                    m.id, m.task
                ));
            }
            if !loader.does(m.task) {
                return Err(format!(
                    "model '{}': family '{}' does not do task '{}' (it does: {})",
                    m.id,
                    m.family,
                    m.task,
                    audiocpp_engine::task::names(loader.info.tasks)
                ));
            }
            if !m.path.is_file() {
                return Err(format!(
                    "model '{}': file '{}' does not exist",
                    m.id,
                    m.path.display()
                ));
            }
            match m.parallel {
                Some(0) => {
                    return Err(format!(
                        "model '{}': parallel is 0; it must be at least 1",
                        m.id
                    ))
                }
                Some(n) if n > MAX_PARALLEL => {
                    return Err(format!(
                        "model '{}': parallel {n} is more than {MAX_PARALLEL}; each worker holds its own caches",
                        m.id
                    ))
                }
                Some(n) if n > 1 && m.task == Task::Vad => {
                    return Err(format!(
                        "model '{}': parallel {n} is for task 'asr' and 'tts' models; 'vad' models run one request at a time (set parallel to 1)",
                        m.id
                    ))
                }
                _ => {}
            }
            if m.batch == 0 || m.batch > MAX_BATCH {
                return Err(format!(
                    "model '{}': batch {} is not between 1 and {MAX_BATCH} (requests decoded together)",
                    m.id, m.batch
                ));
            }
            if m.batch > 1 && m.task != Task::Asr {
                return Err(format!(
                    "model '{}': batch {} is for task 'asr' models, not '{}' (set batch to 1)",
                    m.id, m.batch, m.task
                ));
            }
            if let Some(v) = &m.vad_model {
                if m.task != Task::Asr {
                    return Err(format!(
                        "model '{}': vad_model is for task 'asr' models, not '{}'",
                        m.id, m.task
                    ));
                }
                if !v.is_file() {
                    return Err(format!(
                        "model '{}': vad_model '{}' does not exist",
                        m.id,
                        v.display()
                    ));
                }
                audiocpp_engine::families::find(&m.vad_family)
                    .map_err(|e| format!("model '{}': vad_family: {e}", m.id))?;
                m.vad_backend
                    .parse::<audiocpp_engine::backend::BackendKind>()
                    .map_err(|e| format!("model '{}': vad_backend: {e}", m.id))?;
            }
        }
        self.backend
            .parse::<audiocpp_engine::backend::BackendKind>()
            .map_err(|e| e.to_string())?;
        if self.api_key.as_deref() == Some("") {
            return Err(
                "api_key is empty: set a key, or remove api_key (null) to serve without one".into(),
            );
        }
        for (key, value) in [
            ("max_connections", self.max_connections as u64),
            ("header_timeout_ms", self.header_timeout_ms),
            ("body_timeout_ms", self.body_timeout_ms),
            ("shutdown_timeout_ms", self.shutdown_timeout_ms),
            ("max_body_bytes", self.max_body_bytes as u64),
            ("max_voices", self.max_voices as u64),
        ] {
            if value == 0 {
                return Err(format!("{key} is 0; it must be at least 1"));
            }
        }
        for o in &self.cors_origins {
            if o == "*" {
                if self.cors_origins.len() > 1 {
                    return Err("cors_origins: \"*\" (any origin) must be the only entry".into());
                }
            } else if !(o.starts_with("http://") || o.starts_with("https://"))
                || o.parse::<axum::http::HeaderValue>().is_err()
            {
                return Err(format!(
                    "cors_origins: '{o}' is not an origin (expected \"*\" or scheme://host[:port], e.g. http://localhost:3000)"
                ));
            }
        }
        let speech_limit = audiocpp_engine::tts::MAX_SPEECH_LIMIT_S;
        if !(self.max_speech_s > 0.0 && self.max_speech_s <= speech_limit) {
            return Err(format!(
                "max_speech_s is {}; it must be a positive number of seconds, at most {speech_limit}",
                self.max_speech_s
            ));
        }
        self.audio_limits()
            .validate()
            .map_err(|e| audiocpp_engine::error::spell_parameters(&e, &crate::error::field_of))?;
        Ok(())
    }

    /// The limits every upload is decoded under.
    pub fn audio_limits(&self) -> audiocpp_engine::audio::AudioLimits {
        audiocpp_engine::audio::AudioLimits {
            max_duration_s: self.max_audio_s,
            min_sample_rate_hz: self.min_sample_rate_hz,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_parallel_is_one_worker_per_two_cores_of_the_cap_from_1_to_8() {
        assert_eq!(default_parallel(0, 1), 1);
        assert_eq!(default_parallel(0, 2), 1);
        assert_eq!(default_parallel(0, 8), 4);
        assert_eq!(default_parallel(0, 64), 8);
        assert_eq!(default_parallel(4, 16), 2);
        assert_eq!(default_parallel(1, 16), 1);
        // A cap above the cores counts the cores.
        assert_eq!(default_parallel(100, 6), 3);
    }
}
