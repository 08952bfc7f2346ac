//! The command line: audio.cpp's flag names, declared once with clap and grouped by the
//! task that reads them (each group is a struct and a heading of `--help`), the typed
//! `--task`, and how the CLI spells the engine's parameters as flags.

use std::path::{Path, PathBuf};

use audiocpp_engine::audio::AudioLimits;
use audiocpp_engine::backend::{BackendKind, RuntimeOptions};
use audiocpp_engine::task::Task;
use audiocpp_engine::vad::VadParams;
use clap::{Args, Parser};

use crate::{usage, Failure};

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(
    name = "audiocpp_cli",
    version = audiocpp_engine::VERSION,
    about = "Run audio models (VAD, ASR, TTS) on CPU, CUDA or HIP/ROCm through ggml",
    after_help = "Examples:\n  audiocpp_cli --task vad --family silero_vad --model ggml-silero-v6.2.0.bin --audio in.wav\n  audiocpp_cli --task convert --family silero_vad --model ggml-silero-v6.2.0.bin --out silero.gguf\n  audiocpp_cli --task convert --family whisper --model faster-whisper-tiny.en/ --out whisper-tiny.en.gguf\n  audiocpp_cli --task convert --family whisper --model faster-whisper-tiny.en/ --quantize q8_0 --out whisper-tiny.en-q8_0.gguf\n  audiocpp_cli --task convert --family kokoro --model kokoro.onnx --source voices=voices/ --out kokoro.gguf\n  audiocpp_cli --task asr --family whisper --model whisper-tiny.en.gguf --audio in.wav --text-out in.txt\n  audiocpp_cli --task tts --family kokoro --model kokoro.gguf --text \"Hello there.\" --voice af_heart --out hello.wav\n  audiocpp_cli --task tts --family qwen3_tts --model qwen3-tts-base.gguf --ref-audio me.wav --ref-text \"What I say in it.\" --voice-out me.json\n  audiocpp_cli --task tts --family qwen3_tts --model qwen3-tts-base.gguf --voice me.json --text \"Hello there.\" --out hello.wav\n  audiocpp_cli --list-voices --family kokoro --model kokoro.gguf\n  audiocpp_cli --list-devices --json"
)]
pub struct Flags {
    /// Task to run: vad, asr, tts, convert, info (load the model and describe it).
    #[arg(long)]
    pub task: Option<String>,
    /// Model family (see --list-loaders).
    #[arg(long)]
    pub family: Option<String>,
    /// Model file (GGUF or a supported legacy format; convert also takes a CTranslate2
    /// model folder or its model.bin).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Output file (convert: the GGUF to write; tts: the WAV to write, `-` for standard
    /// output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeFlags,
    /// List the devices of this build and exit.
    #[arg(long)]
    pub list_devices: bool,
    /// List the model families this build can load and exit.
    #[arg(long)]
    pub list_loaders: bool,
    /// List the voices of --model (a TTS family's) and exit.
    #[arg(long)]
    pub list_voices: bool,
    /// Print results as JSON instead of key=value lines (and errors as one JSON line
    /// on stderr).
    #[arg(long)]
    pub json: bool,
    /// Show ggml's own log lines (hidden by default; their reason still reaches the
    /// final `error:` line).
    #[arg(long)]
    pub verbose: bool,
    #[command(flatten)]
    pub audio: AudioFlags,
    #[command(flatten)]
    pub vad: VadFlags,
    #[command(flatten)]
    pub asr: AsrFlags,
    #[command(flatten)]
    pub tts: TtsFlags,
    #[command(flatten)]
    pub convert: ConvertFlags,
}

/// Where a model runs and how it is described (every task that loads one).
#[derive(Debug, Args)]
pub struct RuntimeFlags {
    /// Backend: cpu, cuda, hip (alias rocm), vulkan, metal, best.
    #[arg(long, default_value = "cpu")]
    pub backend: String,
    /// Device index among the backend's devices (see --list-devices).
    #[arg(long)]
    pub device: Option<usize>,
    /// The most CPU threads (default: all cores); on Linux each graph runs with only
    /// those that have a free core.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// A model spec file, or a folder holding <family>.json, to use instead of any other.
    #[arg(long)]
    pub model_spec_override: Option<PathBuf>,
}

impl RuntimeFlags {
    /// The engine's runtime options (a backend name this build lacks is an error).
    pub fn options(&self) -> Result<RuntimeOptions, Failure> {
        Ok(RuntimeOptions {
            backend: self.backend.parse::<BackendKind>()?,
            device: self.device,
            threads: self.threads,
        })
    }
}

/// The audio `--task vad` and `--task asr` read.
#[derive(Debug, Args)]
#[command(next_help_heading = "Audio input (--task vad, asr)")]
pub struct AudioFlags {
    /// Input audio (WAV, FLAC, MP3, AAC in M4A/MP4 or ADTS, Vorbis or Opus in Ogg or
    /// WebM; any rate and channel count).
    #[arg(long)]
    pub audio: Option<PathBuf>,
    /// Refuse audio longer than this many seconds (checked from the header before
    /// decoding; default 21600, six hours).
    #[arg(long, value_name = "SECONDS")]
    pub max_audio_s: Option<f64>,
    /// Refuse audio sampled below this rate in Hz (default 4000): resampling a lower
    /// rate up to the model's multiplies the samples.
    #[arg(long, value_name = "HZ")]
    pub min_sample_rate_hz: Option<u32>,
}

impl AudioFlags {
    /// The `--audio` file `task` reads, checked to exist.
    pub fn input(&self, task: Task) -> Result<&Path, Failure> {
        let audio = self
            .audio
            .as_deref()
            .ok_or_else(|| usage(format!("--task {task} needs --audio FILE")))?;
        if !audio.is_file() {
            return Err(usage(format!(
                "--audio '{}' does not exist or is not a file",
                audio.display()
            )));
        }
        Ok(audio)
    }

    /// The decoded-audio limits: the engine's defaults with the flags applied.
    pub fn limits(&self) -> Result<AudioLimits, Failure> {
        let d = AudioLimits::default();
        let limits = AudioLimits {
            max_duration_s: self.max_audio_s.unwrap_or(d.max_duration_s),
            min_sample_rate_hz: self.min_sample_rate_hz.unwrap_or(d.min_sample_rate_hz),
        };
        limits
            .validate()
            .map_err(|e| usage(audiocpp_engine::error::spell_parameters(&e, &flag_of)))?;
        Ok(limits)
    }
}

/// Voice activity detection: `--task vad`, and the VAD that cuts `--task asr`'s audio.
#[derive(Debug, Args)]
#[command(next_help_heading = "Voice activity detection (--task vad; --task asr with --vad-model)")]
pub struct VadFlags {
    /// VAD: write the speech segments to this JSON file.
    #[arg(long)]
    pub vad_chunks_out: Option<PathBuf>,
    /// VAD: speech probability threshold (default from the model spec, 0.5).
    #[arg(long)]
    pub vad_threshold: Option<f32>,
    /// VAD: minimum speech duration in ms.
    #[arg(long)]
    pub vad_min_speech_ms: Option<u32>,
    /// VAD: minimum silence duration in ms that ends a segment.
    #[arg(long)]
    pub vad_min_silence_ms: Option<u32>,
    /// VAD: padding added to both ends of each segment in ms.
    #[arg(long)]
    pub vad_speech_pad_ms: Option<u32>,
    /// VAD: split segments longer than this many seconds.
    #[arg(long)]
    pub vad_max_speech_s: Option<f32>,
}

impl VadFlags {
    /// A VAD model's segmentation defaults `d` with the flags applied.
    pub fn params(&self, d: VadParams) -> VadParams {
        VadParams {
            threshold: self.vad_threshold.unwrap_or(d.threshold),
            min_speech_duration_ms: self.vad_min_speech_ms.unwrap_or(d.min_speech_duration_ms),
            min_silence_duration_ms: self.vad_min_silence_ms.unwrap_or(d.min_silence_duration_ms),
            speech_pad_ms: self.vad_speech_pad_ms.unwrap_or(d.speech_pad_ms),
            max_speech_duration_s: self.vad_max_speech_s.or(d.max_speech_duration_s),
            neg_threshold: d.neg_threshold,
        }
    }

    /// The segmentation tuning flags, each with whether it was given.
    pub fn tuning(&self) -> [(&'static str, bool); 5] {
        [
            ("--vad-threshold", self.vad_threshold.is_some()),
            ("--vad-min-speech-ms", self.vad_min_speech_ms.is_some()),
            ("--vad-min-silence-ms", self.vad_min_silence_ms.is_some()),
            ("--vad-speech-pad-ms", self.vad_speech_pad_ms.is_some()),
            ("--vad-max-speech-s", self.vad_max_speech_s.is_some()),
        ]
    }
}

/// Speech recognition: `--task asr`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Speech recognition (--task asr)")]
pub struct AsrFlags {
    /// Write the transcript here (ASR families).
    #[arg(long)]
    pub text_out: Option<PathBuf>,
    /// ASR: print each segment's start and end times (key=value lines and --json); the
    /// transcript is the same with or without it.
    #[arg(long)]
    pub timestamps: bool,
    /// ASR: decode without timestamp tokens, as faster-whisper's
    /// without_timestamps=True: each 30 s window is read whole as one segment, and a
    /// window whose text ends early loses the rest of its speech. The default predicts
    /// timestamps and seeks by them, so every window is transcribed.
    #[arg(long)]
    pub without_timestamps: bool,
    /// ASR: write the segments (start, end in seconds, text) to this JSON file.
    #[arg(long)]
    pub segments_out: Option<PathBuf>,
    /// ASR: time each word from the cross-attention of the model's alignment heads
    /// (faster-whisper's word_timestamps=True): each segment of --json and
    /// --segments-out gets `words` (word, start, end, probability), the key=value
    /// output `word.N=START-END WORD` lines, and --subtitles-out one cue per word. Needs timestamp decoding, so not with
    /// --without-timestamps.
    #[arg(long)]
    pub word_timestamps: bool,
    /// ASR: write subtitles to this file, SRT or WebVTT by its extension (.srt, .vtt):
    /// one cue per segment, or one per word with --word-timestamps.
    #[arg(long, value_name = "FILE")]
    pub subtitles_out: Option<PathBuf>,
    /// ASR: temperatures to fall back through, comma-separated (default from the model
    /// spec: 0,0.2,0.4,0.6,0.8,1); `0` decodes greedily only.
    #[arg(long, value_delimiter = ',')]
    pub temperatures: Option<Vec<f32>>,
    /// ASR: find speech with this VAD model first (e.g. ggml-silero-v6.2.0.bin) and
    /// transcribe it in chunks of up to 30 s that start and end in pauses, skipping long
    /// silences; the --vad-* flags tune it (padding defaults to 400 ms here).
    #[arg(long, value_name = "FILE")]
    pub vad_model: Option<PathBuf>,
    /// ASR: family of --vad-model.
    #[arg(long, default_value = "silero_vad")]
    pub vad_family: String,
    /// ASR: backend of --vad-model (cpu, cuda, hip, vulkan, metal, best). The CPU by
    /// default: Silero's recurrence is hundreds of tiny steps, slower through a GPU's
    /// kernel launches than on the CPU, so --backend gives the GPU to the ASR model only.
    #[arg(long, default_value = "cpu")]
    pub vad_backend: String,
    /// ASR with --vad-model: decode up to this many of the VAD's chunks at once, as one
    /// batch (1 to 32). With the engine's CPU kernels the transcript is the same at any
    /// value, and one after another (the default, 1) is as fast or faster; on a GPU a
    /// batch of 8 was 1.5x faster, and its sums over several chunks may round
    /// differently, so a near tie can go another way (docs/models/whisper.md).
    #[arg(long)]
    pub batch: Option<usize>,
    /// ASR: spoken language code (de, en, ...) or auto: detect it on the first 30 s
    /// (multilingual models; English-only ones take en). Default from the model spec: auto.
    /// TTS (multilingual families, see --list-voices): the text's language, or auto.
    #[arg(long)]
    pub language: Option<String>,
}

/// Speech synthesis: `--task tts`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Speech synthesis (--task tts)")]
pub struct TtsFlags {
    /// TTS: the text to speak.
    #[arg(long)]
    pub text: Option<String>,
    /// TTS: read the text to speak from this UTF-8 file (at most 1 MiB).
    #[arg(long, value_name = "FILE")]
    pub text_file: Option<PathBuf>,
    /// TTS: speak these phonemes (the family's alphabet, e.g. misaki's for Kokoro)
    /// instead of text, skipping the text front end.
    #[arg(long)]
    pub phonemes: Option<String>,
    /// TTS: the voice (see --list-voices; default: the model's first), or a voice file
    /// --voice-out saved (a value ending in .json or holding a / is a file's path).
    #[arg(long)]
    pub voice: Option<String>,
    /// TTS (qwen3_tts Base): clone the voice of this recording (1 to 30 s of clear
    /// speech, any format and rate the CLI reads).
    #[arg(long, value_name = "FILE")]
    pub ref_audio: Option<PathBuf>,
    /// TTS: what --ref-audio says, word for word (in-context cloning, the closest).
    #[arg(long, value_name = "TEXT")]
    pub ref_text: Option<String>,
    /// TTS: clone from --ref-audio's speaker embedding alone (no --ref-text needed;
    /// less close to the recording).
    #[arg(long)]
    pub x_vector_only: bool,
    /// TTS: save the voice cloned from --ref-audio to this file (reuse it with --voice
    /// FILE.json; the encoders do not run again). Without --text, only the voice is made.
    #[arg(long, value_name = "FILE.json")]
    pub voice_out: Option<PathBuf>,
    /// TTS: speaking rate, from 0.25 to 4 (1: the voice's own).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f32,
    /// TTS: how to speak, for families that follow instructions (qwen3_tts 1.7B: "a calm
    /// low voice", "very happy").
    #[arg(long)]
    pub instructions: Option<String>,
    /// TTS: sampling temperature of families that sample (qwen3_tts); 0 decodes greedily
    /// (reproducible). Default: the model's generation config.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// TTS: seed of the sampler, so a sampled result can be made again (default 0).
    #[arg(long)]
    pub seed: Option<u64>,
    /// TTS: the most codec frames one sentence may take (qwen3_tts: 12.5 per second);
    /// default: the model's generation limit.
    #[arg(long, value_name = "N")]
    pub max_frames: Option<usize>,
    /// TTS: stop with an error once the speech passes this many seconds (default 1800).
    #[arg(long, value_name = "SECONDS")]
    pub max_speech_s: Option<f64>,
}

/// Conversion to GGUF: `--task convert`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Conversion to GGUF (--task convert)")]
pub struct ConvertFlags {
    /// Convert: the weight type. whisper: q8_0 (its linear layers as 8-bit blocks), or f16
    /// to keep the model's own type (the default); kokoro: f32 (the default), f16, or q8_0
    /// (the decoder's residual-block convolutions as 8-bit blocks).
    #[arg(long)]
    pub quantize: Option<String>,
    /// Convert: a further source the family reads, by its name (repeatable; kokoro:
    /// voices, vocab, lexicons, as the three flags below); a family refuses a name it
    /// does not take.
    #[arg(long, value_name = "NAME=PATH", value_parser = parse_source)]
    pub source: Vec<(String, PathBuf)>,
    /// Convert (kokoro): the folder of voice files (kokoro-js's voices/, <name>.bin);
    /// the same as --source voices=DIR.
    #[arg(long, value_name = "DIR")]
    pub voices: Option<PathBuf>,
    /// Convert (kokoro): the symbol vocabulary, {"vocab": {symbol: id}} (default:
    /// vocab.json beside --model); the same as --source vocab=FILE.
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,
    /// Convert (kokoro): the folder with misaki's us_gold.json, us_silver.json,
    /// gb_gold.json and gb_silver.json (default: the folder of --model); the same as
    /// --source lexicons=DIR.
    #[arg(long, value_name = "DIR")]
    pub lexicons: Option<PathBuf>,
}

impl ConvertFlags {
    /// Every source by name: the named flags' (`--voices`, `--vocab`, `--lexicons`)
    /// first, then `--source`'s in their order; a name given twice is an error.
    pub fn sources(&self) -> Result<Vec<(String, PathBuf)>, Failure> {
        let named = [
            ("voices", &self.voices),
            ("vocab", &self.vocab),
            ("lexicons", &self.lexicons),
        ];
        let mut sources: Vec<(String, PathBuf)> = named
            .into_iter()
            .filter_map(|(name, path)| path.clone().map(|p| (name.to_string(), p)))
            .collect();
        for (name, path) in &self.source {
            if sources.iter().any(|(n, _)| n == name) {
                return Err(usage(format!(
                    "--source {name}: the source '{name}' is given twice; give it once"
                )));
            }
            sources.push((name.clone(), path.clone()));
        }
        Ok(sources)
    }
}

/// Parses `--source NAME=PATH`.
fn parse_source(arg: &str) -> Result<(String, PathBuf), String> {
    match arg.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!(
            "'{arg}' is not NAME=PATH (e.g. --source voices=kokoro-js/voices)"
        )),
    }
}

/// What `--task` names: a task of the engine, or the CLI's own `info` (load a model as
/// its task would and describe it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliTask {
    /// One of the engine's tasks.
    Run(Task),
    /// `--task info`.
    Info,
}

impl CliTask {
    /// Every name `--task` takes, as the errors list them ("vad, asr, tts, convert or
    /// info").
    pub fn names(last_separator: &str) -> String {
        let engine: Vec<&str> = Task::ALL.iter().map(|t| t.name()).collect();
        format!("{}{last_separator}info", engine.join(", "))
    }
}

impl std::str::FromStr for CliTask {
    type Err = Failure;

    fn from_str(s: &str) -> Result<Self, Failure> {
        if s == "info" {
            return Ok(CliTask::Info);
        }
        s.parse::<Task>().map(CliTask::Run).map_err(|_| {
            usage(format!(
                "unknown task '{s}' (expected {})",
                CliTask::names(" or ")
            ))
        })
    }
}

/// The flag that sets an engine parameter ([`audiocpp_engine::error::PARAMETERS`]):
/// how the CLI's errors and warnings name what the engine calls `parameter 'NAME'`.
pub fn flag_of(parameter: &str) -> Option<String> {
    let flag = match parameter {
        "threshold" => "--vad-threshold",
        "min_speech_duration_ms" => "--vad-min-speech-ms",
        "min_silence_duration_ms" => "--vad-min-silence-ms",
        "speech_pad_ms" => "--vad-speech-pad-ms",
        "max_speech_duration_s" => "--vad-max-speech-s",
        "input" => "--text",
        other => return Some(format!("--{}", other.replace('_', "-"))),
    };
    Some(flag.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use audiocpp_engine::EngineError;
    use clap::CommandFactory;

    #[test]
    fn every_engine_parameter_has_a_flag_of_this_cli() {
        let command = Flags::command();
        let longs: Vec<String> = command
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for p in audiocpp_engine::error::PARAMETERS {
            let flag = flag_of(p).unwrap_or_else(|| panic!("no flag for '{p}'"));
            assert!(longs.contains(&flag), "'{p}' maps to {flag}, not a flag");
        }
        let e = EngineError::Usage("parameter 'max_speech_duration_s' -1 must be positive".into());
        assert_eq!(
            Failure::from(e).message,
            "--vad-max-speech-s -1 must be positive"
        );
    }

    /// Every command of the package README (`packaging/readme/package.md`) parses, with
    /// a task and a family this build has, and every `--flag` its text names is a flag
    /// of this CLI: a renamed flag fails here, not for a new user of the package.
    #[test]
    fn the_package_readme_commands_and_flags_are_this_clis() {
        let commands = audiocpp_test_support::package_readme_commands("{{cli}}");
        assert!(commands.len() >= 10, "{commands:?}");
        for c in &commands {
            let args = std::iter::once("audiocpp_cli").chain(c[1..].iter().map(String::as_str));
            let flags = match Flags::try_parse_from(args) {
                Ok(flags) => flags,
                Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => continue,
                Err(e) => panic!("{c:?}: {e}"),
            };
            if let Some(task) = &flags.task {
                task.parse::<CliTask>()
                    .unwrap_or_else(|e| panic!("{c:?}: {}", e.message));
            }
            if let Some(family) = &flags.family {
                audiocpp_engine::families::find(family).unwrap_or_else(|e| panic!("{c:?}: {e}"));
            }
        }
        let longs: Vec<String> = Flags::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        let readme = audiocpp_test_support::package_readme();
        let mut in_code = false;
        for line in readme.lines() {
            in_code ^= line.starts_with("```");
            if in_code {
                continue;
            }
            for (at, _) in line.match_indices("`--") {
                let flag: String = line[at + 1..]
                    .chars()
                    .take_while(|c| *c == '-' || c.is_ascii_alphanumeric())
                    .collect();
                assert!(
                    longs.contains(&flag),
                    "{flag} is no flag of audiocpp_cli: {line}"
                );
            }
        }
    }

    #[test]
    fn task_names_parse_to_the_engine_task_or_info() {
        assert_eq!("info".parse::<CliTask>().unwrap(), CliTask::Info);
        for t in Task::ALL {
            assert_eq!(t.name().parse::<CliTask>().unwrap(), CliTask::Run(t));
        }
        let e = "dance".parse::<CliTask>().unwrap_err();
        assert_eq!(e.code, 2);
        assert_eq!(
            e.message,
            "unknown task 'dance' (expected vad, asr, tts, convert or info)"
        );
    }

    #[test]
    fn sources_come_from_the_named_flags_and_source_and_refuse_a_name_twice() {
        let flags = Flags::parse_from([
            "audiocpp_cli",
            "--vocab",
            "v.json",
            "--source",
            "voices=dir=x",
            "--source",
            "lexicons=lex",
        ]);
        let sources = flags.convert.sources().unwrap();
        assert_eq!(
            sources,
            [
                ("vocab".to_string(), PathBuf::from("v.json")),
                ("voices".to_string(), PathBuf::from("dir=x")),
                ("lexicons".to_string(), PathBuf::from("lex")),
            ]
        );
        let flags = Flags::parse_from(["audiocpp_cli", "--vocab", "a", "--source", "vocab=b"]);
        let e = flags.convert.sources().unwrap_err();
        assert!(
            e.message.contains("'vocab' is given twice"),
            "{}",
            e.message
        );
        for bad in ["voices", "=dir", "voices="] {
            let e = Flags::try_parse_from(["audiocpp_cli", "--source", bad]).unwrap_err();
            assert!(e.to_string().contains("is not NAME=PATH"), "{e}");
        }
    }
}
