//! `audiocpp_cli`: run audio models from the command line.
//!
//! Thin by design: parse flags (audio.cpp's flag names), call the engine, print
//! `key=value` lines or JSON, and map errors to exit codes (2 for bad input).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use audiocpp_engine::asr::{AsrModel, AsrOutput};
use audiocpp_engine::audio::{self, AudioLimits};
use audiocpp_engine::backend::{self, BackendKind, RuntimeOptions};
use audiocpp_engine::families;
use audiocpp_engine::output;
use audiocpp_engine::tasks;
use audiocpp_engine::tts::{self, SpeechInput, SpeechOptions, SpeechRequest, TtsModel};
use audiocpp_engine::vad::{VadModel, VadOutput, VadParams};
use audiocpp_engine::EngineError;
use clap::Parser;

/// Command-line flags.
#[derive(Debug, Parser)]
#[command(
    name = "audiocpp_cli",
    version = audiocpp_engine::VERSION,
    about = "Run audio models (VAD, ASR, TTS) on CPU, CUDA or HIP/ROCm through ggml",
    after_help = "Examples:\n  audiocpp_cli --task vad --family silero_vad --model ggml-silero-v6.2.0.bin --audio in.wav\n  audiocpp_cli --task convert --family silero_vad --model ggml-silero-v6.2.0.bin --out silero.gguf\n  audiocpp_cli --task convert --family whisper --model faster-whisper-tiny.en/ --out whisper-tiny.en.gguf\n  audiocpp_cli --task convert --family whisper --model faster-whisper-tiny.en/ --quantize q8_0 --out whisper-tiny.en-q8_0.gguf\n  audiocpp_cli --task asr --family whisper --model whisper-tiny.en.gguf --audio in.wav --text-out in.txt\n  audiocpp_cli --task tts --family kokoro --model kokoro.gguf --text \"Hello there.\" --voice af_heart --out hello.wav\n  audiocpp_cli --list-voices --family kokoro --model kokoro.gguf\n  audiocpp_cli --list-devices --json"
)]
struct Flags {
    /// Task to run: vad, asr, tts, convert, info (load the model and describe it).
    #[arg(long)]
    task: Option<String>,
    /// Model family (see --list-loaders).
    #[arg(long)]
    family: Option<String>,
    /// Model file (GGUF or a supported legacy format; convert also takes a CTranslate2
    /// model folder or its model.bin).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Input audio (WAV, FLAC, MP3; any rate and channel count).
    #[arg(long)]
    audio: Option<PathBuf>,
    /// TTS: the text to speak.
    #[arg(long)]
    text: Option<String>,
    /// TTS: read the text to speak from this UTF-8 file (at most 1 MiB).
    #[arg(long, value_name = "FILE")]
    text_file: Option<PathBuf>,
    /// TTS: speak these phonemes (the family's alphabet, e.g. misaki's for Kokoro)
    /// instead of text, skipping the text front end.
    #[arg(long)]
    phonemes: Option<String>,
    /// TTS: the voice (see --list-voices; default: the model's first).
    #[arg(long)]
    voice: Option<String>,
    /// TTS: speaking rate, from 0.25 to 4 (1: the voice's own).
    #[arg(long, default_value_t = 1.0)]
    speed: f32,
    /// TTS: how to speak, for families that follow instructions (qwen3_tts 1.7B: "a calm
    /// low voice", "very happy").
    #[arg(long)]
    instructions: Option<String>,
    /// TTS: sampling temperature of families that sample (qwen3_tts); 0 decodes greedily
    /// (reproducible). Default: the model's generation config.
    #[arg(long)]
    temperature: Option<f32>,
    /// TTS: seed of the sampler, so a sampled result can be made again (default 0).
    #[arg(long)]
    seed: Option<u64>,
    /// TTS: the most codec frames one sentence may take (qwen3_tts: 12.5 per second);
    /// default: the model's generation limit.
    #[arg(long, value_name = "N")]
    max_frames: Option<usize>,
    /// TTS: stop with an error once the speech passes this many seconds (default 1800).
    #[arg(long, value_name = "SECONDS")]
    max_speech_s: Option<f64>,
    /// List the voices of --model (a TTS family's) and exit.
    #[arg(long)]
    list_voices: bool,
    /// Output file (convert: the GGUF to write; tts: the WAV to write, `-` for standard
    /// output).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Convert: the weight type. whisper: q8_0 (its linear layers as 8-bit blocks), or f16
    /// to keep the model's own type (the default); kokoro: f32 (the default), f16, or q8_0
    /// (the decoder's residual-block convolutions as 8-bit blocks).
    #[arg(long)]
    quantize: Option<String>,
    /// Convert (kokoro): the folder of voice files (kokoro-js's voices/, <name>.bin).
    #[arg(long, value_name = "DIR")]
    voices: Option<PathBuf>,
    /// Convert (kokoro): the symbol vocabulary, {"vocab": {symbol: id}} (default:
    /// vocab.json beside --model).
    #[arg(long, value_name = "FILE")]
    vocab: Option<PathBuf>,
    /// Convert (kokoro): the folder with misaki's us_gold.json, us_silver.json,
    /// gb_gold.json and gb_silver.json (default: the folder of --model).
    #[arg(long, value_name = "DIR")]
    lexicons: Option<PathBuf>,
    /// Write the transcript here (ASR families).
    #[arg(long)]
    text_out: Option<PathBuf>,
    /// ASR: print each segment's start and end times (key=value lines and --json); the
    /// transcript is the same with or without it.
    #[arg(long)]
    timestamps: bool,
    /// ASR: decode without timestamp tokens, as faster-whisper's
    /// without_timestamps=True: each 30 s window is read whole as one segment, and a
    /// window whose text ends early loses the rest of its speech. The default predicts
    /// timestamps and seeks by them, so every window is transcribed.
    #[arg(long)]
    without_timestamps: bool,
    /// ASR: write the segments (start, end in seconds, text) to this JSON file.
    #[arg(long)]
    segments_out: Option<PathBuf>,
    /// ASR: temperatures to fall back through, comma-separated (default from the model
    /// spec: 0,0.2,0.4,0.6,0.8,1); `0` decodes greedily only.
    #[arg(long, value_delimiter = ',')]
    temperatures: Option<Vec<f32>>,
    /// ASR: find speech with this VAD model first (e.g. ggml-silero-v6.2.0.bin) and
    /// transcribe it in chunks of up to 30 s that start and end in pauses, skipping long
    /// silences; the --vad-* flags tune it (padding defaults to 400 ms here).
    #[arg(long, value_name = "FILE")]
    vad_model: Option<PathBuf>,
    /// ASR: family of --vad-model.
    #[arg(long, default_value = "silero_vad")]
    vad_family: String,
    /// ASR: spoken language code (de, en, ...) or auto: detect it on the first 30 s
    /// (multilingual models; English-only ones take en). Default from the model spec: auto.
    /// TTS (multilingual families, see --list-voices): the text's language, or auto.
    #[arg(long)]
    language: Option<String>,
    /// Backend: cpu, cuda, hip (alias rocm), vulkan, metal, best.
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// Device index among the backend's devices (see --list-devices).
    #[arg(long)]
    device: Option<usize>,
    /// The most CPU threads (default: all cores); on Linux each graph runs with only those that have a free core.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// A model spec file, or a folder holding <family>.json, to use instead of any other.
    #[arg(long)]
    model_spec_override: Option<PathBuf>,
    /// VAD: write the speech segments to this JSON file.
    #[arg(long)]
    vad_chunks_out: Option<PathBuf>,
    /// VAD: speech probability threshold (default from the model spec, 0.5).
    #[arg(long)]
    vad_threshold: Option<f32>,
    /// VAD: minimum speech duration in ms.
    #[arg(long)]
    vad_min_speech_ms: Option<u32>,
    /// VAD: minimum silence duration in ms that ends a segment.
    #[arg(long)]
    vad_min_silence_ms: Option<u32>,
    /// VAD: padding added to both ends of each segment in ms.
    #[arg(long)]
    vad_speech_pad_ms: Option<u32>,
    /// VAD: split segments longer than this many seconds.
    #[arg(long)]
    vad_max_speech_s: Option<f32>,
    /// Refuse audio longer than this many seconds (checked from the header before
    /// decoding; default 21600, six hours).
    #[arg(long, value_name = "SECONDS")]
    max_audio_s: Option<f64>,
    /// Refuse audio sampled below this rate in Hz (default 4000): resampling a lower
    /// rate up to the model's multiplies the samples.
    #[arg(long, value_name = "HZ")]
    min_sample_rate_hz: Option<u32>,
    /// List the devices of this build and exit.
    #[arg(long)]
    list_devices: bool,
    /// List the model families this build can load and exit.
    #[arg(long)]
    list_loaders: bool,
    /// Print results as JSON instead of key=value lines (and errors as one JSON line
    /// on stderr).
    #[arg(long)]
    json: bool,
    /// Show ggml's own log lines (hidden by default; their reason still reaches the
    /// final `error:` line).
    #[arg(long)]
    verbose: bool,
}

/// A failure with its exit code.
struct Failure {
    code: u8,
    message: String,
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Self {
        Failure {
            code: if e.is_user_error() { 2 } else { 1 },
            message: e.message_in(&flag_of),
        }
    }
}

/// The flag that sets an engine parameter ([`audiocpp_engine::error::PARAMETERS`]):
/// how the CLI's errors and warnings name what the engine calls `parameter 'NAME'`.
fn flag_of(parameter: &str) -> Option<String> {
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

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: 2,
        message: message.into(),
    }
}

/// `println!` for results: a closed pipe (`audiocpp_cli ... | head`) ends the process
/// quietly with status 0, as SIGPIPE does for C tools; any other write error (a full
/// disk behind a redirect, `/dev/full`) is a failure with exit code 2.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            return Err(usage(format!("cannot write to standard output: {e}")));
        }
    }};
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    // An interrupted write leaves no hidden partial file behind.
    let handler = ctrlc::set_handler(|| {
        audiocpp_engine::output::remove_partials();
        std::process::exit(130);
    });
    if let Err(e) = handler {
        eprintln!("warning: cannot handle SIGINT/SIGTERM ({e}); an interrupted write may leave a .partial file");
    }
    audiocpp_engine::ggml::log::set_verbose(flags.verbose);
    audiocpp_engine::error::set_warning_spelling(flag_of);
    let json = flags.json;
    match run(flags) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if json {
                let e =
                    serde_json::json!({ "error": { "message": f.message, "exit_code": f.code } });
                eprintln!("{e}");
            } else {
                eprintln!("error: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

fn run(flags: Flags) -> Result<(), Failure> {
    if flags.list_devices {
        return list_devices(flags.json);
    }
    if flags.list_loaders {
        return list_loaders(flags.json);
    }
    let task = match (flags.task.as_deref(), flags.list_voices) {
        (Some(task), false) | (Some(task @ "tts"), true) => task,
        (None, true) => "tts",
        (Some(task), true) => {
            return Err(usage(format!(
                "--list-voices is for TTS models, not --task {task}"
            )))
        }
        (None, false) => {
            return Err(usage(
                "--task is required (vad, asr, tts, convert, info); see --help",
            ))
        }
    };
    let family = flags
        .family
        .as_deref()
        .ok_or_else(|| usage("--family is required (see --list-loaders)"))?;
    let model = flags
        .model
        .as_deref()
        .ok_or_else(|| usage("--model is required"))?;
    families::find(family)?;
    // A converter may read a model folder (Whisper's CTranslate2 one); it says if not.
    let folder_ok = task == "convert" && model.is_dir();
    if !model.is_file() && !folder_ok {
        return Err(usage(format!(
            "--model '{}' does not exist or is not a file",
            model.display()
        )));
    }
    match task {
        "vad" => run_vad(&flags, family, model),
        "asr" => run_asr(&flags, family, model),
        "convert" => {
            let out = flags
                .out
                .as_deref()
                .ok_or_else(|| usage("--task convert needs --out FILE.gguf"))?;
            let options = families::ConvertOptions {
                quantize: flags.quantize.clone(),
                sources: [
                    ("voices", &flags.voices),
                    ("vocab", &flags.vocab),
                    ("lexicons", &flags.lexicons),
                ]
                .into_iter()
                .filter_map(|(name, path)| path.clone().map(|p| (name.to_string(), p)))
                .collect(),
            };
            let r = tasks::convert(
                family,
                model,
                flags.model_spec_override.as_deref(),
                out,
                &options,
            )?;
            if flags.json {
                out!("{}", serde_json::to_string_pretty(&r).expect("serialises"));
            } else {
                out!(
                    "task=convert\nout={}\nbytes={}\ntensors={}",
                    r.out.display(),
                    r.bytes,
                    r.tensors
                );
            }
            Ok(())
        }
        "info" => run_info(&flags, family, model),
        "tts" => run_tts(&flags, family, model),
        other => Err(usage(format!(
            "unknown task '{other}' (expected vad, asr, tts, convert or info)"
        ))),
    }
}

/// The largest `--text-file` read: far more text than an hour of speech, and a bound on
/// what a mistaken path (a disk image, a log) makes the CLI read.
const MAX_TEXT_FILE_BYTES: u64 = 1 << 20;

/// What `--task tts` speaks, from exactly one of --text, --text-file, --phonemes.
fn speech_input(flags: &Flags) -> Result<SpeechInput, Failure> {
    let given: Vec<&str> = [
        ("--text", flags.text.is_some()),
        ("--text-file", flags.text_file.is_some()),
        ("--phonemes", flags.phonemes.is_some()),
    ]
    .iter()
    .filter(|(_, g)| *g)
    .map(|(f, _)| *f)
    .collect();
    if given.len() > 1 {
        return Err(usage(format!(
            "{} were given; --task tts speaks one of them",
            given.join(" and ")
        )));
    }
    let (flag, input) = if let Some(t) = &flags.text {
        ("--text", SpeechInput::Text(t.clone()))
    } else if let Some(p) = &flags.phonemes {
        ("--phonemes", SpeechInput::Phonemes(p.clone()))
    } else if let Some(path) = &flags.text_file {
        let cannot = |why: String| usage(format!("--text-file '{}': {why}", path.display()));
        let file = std::fs::File::open(path).map_err(|e| cannot(format!("cannot read it: {e}")))?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(file, MAX_TEXT_FILE_BYTES + 1),
            &mut bytes,
        )
        .map_err(|e| cannot(format!("cannot read it: {e}")))?;
        if bytes.len() as u64 > MAX_TEXT_FILE_BYTES {
            return Err(cannot(format!(
                "it is larger than {MAX_TEXT_FILE_BYTES} bytes; split it into smaller files"
            )));
        }
        let text =
            String::from_utf8(bytes).map_err(|e| cannot(format!("it is not UTF-8 text ({e})")))?;
        ("--text-file", SpeechInput::Text(text))
    } else {
        return Err(usage(
            "--task tts needs --text TEXT, --text-file FILE or --phonemes PHONEMES",
        ));
    };
    let (SpeechInput::Text(t) | SpeechInput::Phonemes(t)) = &input;
    if t.trim().is_empty() {
        return Err(usage(format!("{flag} is empty: give something to speak")));
    }
    Ok(input)
}

/// `--task tts` (and `--list-voices`): speaks the input and writes a 16-bit WAV through
/// the one output writer; with `--out -` the WAV goes to stdout and the report to stderr.
fn run_tts(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    if let Some(flag) = [
        ("--audio", flags.audio.is_some()),
        ("--text-out", flags.text_out.is_some()),
        ("--vad-model", flags.vad_model.is_some()),
        ("--quantize", flags.quantize.is_some()),
    ]
    .iter()
    .find(|(_, given)| *given)
    .map(|(f, _)| f)
    {
        return Err(usage(format!("{flag} is not a flag of --task tts")));
    }
    let opts = RuntimeOptions {
        backend: flags.backend.parse::<BackendKind>()?,
        device: flags.device,
        threads: flags.threads,
    };
    if flags.list_voices {
        let tts = TtsModel::load(family, model, flags.model_spec_override.as_deref(), &opts)?;
        let voices = tts.voices();
        let languages = tts.languages();
        if flags.json {
            let v = serde_json::json!({ "family": family, "sample_rate": tts.sample_rate(), "voices": voices, "languages": languages });
            out!("{}", serde_json::to_string_pretty(&v).expect("serialises"));
        } else {
            out!("family={family}");
            out!("sample_rate={}", tts.sample_rate());
            out!("voices={}", voices.len());
            for v in &voices {
                out!("voice={v}");
            }
            for l in &languages {
                out!("language={l}");
            }
        }
        return Ok(());
    }
    let input = speech_input(flags)?;
    tts::check_speed(flags.speed)?;
    let max_speech_s = flags.max_speech_s.unwrap_or(tts::DEFAULT_MAX_SPEECH_S);
    tts::check_max_speech_s(max_speech_s)?;
    let out_path = flags
        .out
        .as_deref()
        .ok_or_else(|| usage("--task tts needs --out FILE.wav (or --out - for standard output)"))?;
    // Refuse an output that cannot be written (a directory) before synthesizing.
    output::plan(out_path)?;
    let mut tts = TtsModel::load(family, model, flags.model_spec_override.as_deref(), &opts)?;
    if matches!(input, SpeechInput::Phonemes(_)) && !tts.takes_phonemes() {
        return Err(usage(format!(
            "--phonemes: family '{family}' takes text, not phonemes (use --text)"
        )));
    }
    let req = SpeechRequest {
        input,
        voice: flags.voice.clone(),
        speed: flags.speed,
        options: SpeechOptions {
            language: flags.language.clone(),
            instructions: flags.instructions.clone(),
            temperature: flags.temperature,
            seed: flags.seed,
            max_frames: flags.max_frames,
        },
    };
    tts.check(&req)?;
    let mut samples = Vec::new();
    let stats = tts.run_streamed(&req, max_speech_s, &mut |chunk| {
        samples.extend_from_slice(chunk);
        Ok(())
    })?;
    output::write_wav(out_path, &samples, stats.sample_rate)?;
    let rtf = if stats.audio_seconds > 0.0 {
        stats.inference_ms / 1000.0 / stats.audio_seconds
    } else {
        0.0
    };
    let to_stdout = out_path.as_os_str() == "-";
    let report = if flags.json {
        let mut v = serde_json::to_value(&stats).expect("serialises");
        v["task"] = "tts".into();
        v["out"] = out_path.display().to_string().into();
        v["rtf"] = rtf.into();
        serde_json::to_string_pretty(&v).expect("serialises")
    } else {
        format!(
            "task=tts\nfamily={}\ndevice={}\nspec_source={}\nvoice={}\nsample_rate={}\nsentences={}\naudio_seconds={:.3}\nfirst_audio_ms={:.2}\ninference_ms={:.2}\nrtf={rtf:.5}\nout={}",
            stats.family,
            stats.device,
            stats.spec_source,
            stats.voice,
            stats.sample_rate,
            stats.sentences,
            stats.audio_seconds,
            stats.first_audio_ms,
            stats.inference_ms,
            out_path.display()
        )
    };
    if to_stdout {
        eprintln!("{report}");
    } else {
        out!("{report}");
    }
    Ok(())
}

/// The decoded-audio limits: the engine's defaults with the flags applied.
fn audio_limits(flags: &Flags) -> Result<AudioLimits, Failure> {
    let d = AudioLimits::default();
    let limits = AudioLimits {
        max_duration_s: flags.max_audio_s.unwrap_or(d.max_duration_s),
        min_sample_rate_hz: flags.min_sample_rate_hz.unwrap_or(d.min_sample_rate_hz),
    };
    limits
        .validate()
        .map_err(|e| usage(audiocpp_engine::error::spell_parameters(&e, &flag_of)))?;
    Ok(limits)
}

/// `--task info`: loads the model as its task would and prints what it is.
fn run_info(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    let opts = RuntimeOptions {
        backend: flags.backend.parse::<BackendKind>()?,
        device: flags.device,
        threads: flags.threads,
    };
    let info = tasks::info(family, model, flags.model_spec_override.as_deref(), &opts)?;
    if flags.json {
        out!(
            "{}",
            serde_json::to_string_pretty(&info).expect("serialises")
        );
        return Ok(());
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

fn run_vad(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    let audio = flags
        .audio
        .as_deref()
        .ok_or_else(|| usage("--task vad needs --audio FILE"))?;
    if !audio.is_file() {
        return Err(usage(format!(
            "--audio '{}' does not exist or is not a file",
            audio.display()
        )));
    }
    let opts = RuntimeOptions {
        backend: flags.backend.parse::<BackendKind>()?,
        device: flags.device,
        threads: flags.threads,
    };
    if flags.vad_model.is_some() {
        return Err(usage(
            "--vad-model is for --task asr; --task vad takes the VAD model as --model",
        ));
    }
    let limits = audio_limits(flags)?;
    let mut vad = VadModel::load(family, model, flags.model_spec_override.as_deref(), &opts)?;
    let params = vad_params(flags, vad.default_params());
    let samples = audio::load_limited(audio, vad.sample_rate(), &limits)?.samples;
    let out = vad.run_samples(&samples, &params)?;
    if let Some(path) = &flags.vad_chunks_out {
        output::write_bytes(path, segments_json(&out).as_bytes())?;
    }
    if flags.json {
        let mut v = serde_json::to_value(&out).expect("serialises");
        v["segments"] = serde_json::Value::from(vad_segments(&out));
        out!("{}", serde_json::to_string_pretty(&v).expect("serialises"));
    } else {
        print_vad(&out)?;
    }
    Ok(())
}

/// The VAD model's segmentation defaults with the --vad-* flags applied.
fn vad_params(flags: &Flags, d: VadParams) -> VadParams {
    VadParams {
        threshold: flags.vad_threshold.unwrap_or(d.threshold),
        min_speech_duration_ms: flags.vad_min_speech_ms.unwrap_or(d.min_speech_duration_ms),
        min_silence_duration_ms: flags
            .vad_min_silence_ms
            .unwrap_or(d.min_silence_duration_ms),
        speech_pad_ms: flags.vad_speech_pad_ms.unwrap_or(d.speech_pad_ms),
        max_speech_duration_s: flags.vad_max_speech_s.or(d.max_speech_duration_s),
        neg_threshold: d.neg_threshold,
    }
}

fn run_asr(flags: &Flags, family: &str, model: &Path) -> Result<(), Failure> {
    let audio = flags
        .audio
        .as_deref()
        .ok_or_else(|| usage("--task asr needs --audio FILE"))?;
    if !audio.is_file() {
        return Err(usage(format!(
            "--audio '{}' does not exist or is not a file",
            audio.display()
        )));
    }
    let opts = RuntimeOptions {
        backend: flags.backend.parse::<BackendKind>()?,
        device: flags.device,
        threads: flags.threads,
    };
    let limits = audio_limits(flags)?;
    let mut asr = AsrModel::load(family, model, flags.model_spec_override.as_deref(), &opts)?;
    let mut decode = asr.default_options();
    if let Some(lang) = &flags.language {
        decode.language = lang.clone();
    }
    decode.without_timestamps = flags.without_timestamps;
    if let Some(t) = &flags.temperatures {
        if t.is_empty() || t.iter().any(|&x| !(0.0..=2.0).contains(&x)) {
            return Err(usage(format!(
                "--temperatures {t:?}: give values between 0 and 2, e.g. 0,0.2,0.4"
            )));
        }
        decode.temperatures = t.clone();
    }
    if flags.vad_chunks_out.is_some() {
        return Err(usage("--vad-chunks-out is for --task vad"));
    }
    let tuning = [
        ("--vad-threshold", flags.vad_threshold.is_some()),
        ("--vad-min-speech-ms", flags.vad_min_speech_ms.is_some()),
        ("--vad-min-silence-ms", flags.vad_min_silence_ms.is_some()),
        ("--vad-speech-pad-ms", flags.vad_speech_pad_ms.is_some()),
        ("--vad-max-speech-s", flags.vad_max_speech_s.is_some()),
    ];
    if let (None, Some((flag, _))) = (&flags.vad_model, tuning.iter().find(|(_, given)| *given)) {
        return Err(usage(format!(
            "{flag} tunes the VAD of --task asr: give --vad-model FILE too (or run --task vad)"
        )));
    }
    let out = match &flags.vad_model {
        None => {
            let samples = audio::load_limited(audio, asr.sample_rate(), &limits)?.samples;
            asr.run_samples(&samples, &decode)?
        }
        Some(vad_path) => {
            if !vad_path.is_file() {
                return Err(usage(format!(
                    "--vad-model '{}' does not exist or is not a file",
                    vad_path.display()
                )));
            }
            // A spec folder serves both models; a single spec file is the ASR model's.
            let specs = flags.model_spec_override.as_deref().filter(|p| p.is_dir());
            let mut vad =
                VadModel::load(&flags.vad_family, vad_path, specs, &opts).map_err(|e| {
                    let f = Failure::from(e);
                    Failure {
                        message: format!("--vad-model: {}", f.message),
                        ..f
                    }
                })?;
            let params = vad_params(flags, vad.asr_chunking_params());
            let samples = audio::load_limited(audio, asr.sample_rate(), &limits)?.samples;
            asr.run_samples_with_vad(&samples, &decode, &mut vad, &params)?
        }
    };
    if let Some(path) = &flags.text_out {
        output::write_bytes(path, format!("{}\n", out.text).as_bytes())?;
    }
    if let Some(path) = &flags.segments_out {
        output::write_bytes(path, asr_segments_json(&out).as_bytes())?;
    }
    if flags.json {
        out!(
            "{}",
            serde_json::to_string_pretty(&asr_json(&out, flags.timestamps)).expect("serialises")
        );
    } else {
        print_asr(&out, flags.timestamps)?;
    }
    Ok(())
}

/// The `--json` result: segments carry their times only with `--timestamps`.
fn asr_json(out: &AsrOutput, timestamps: bool) -> serde_json::Value {
    let mut v = serde_json::to_value(out).expect("serialises");
    if !timestamps {
        for seg in v["segments"].as_array_mut().into_iter().flatten() {
            if let Some(fields) = seg.as_object_mut() {
                fields.remove("start");
                fields.remove("end");
            }
        }
    }
    v
}

fn print_asr(out: &AsrOutput, timestamps: bool) -> Result<(), Failure> {
    out!("task=asr");
    out!("family={}", out.family);
    out!("device={}", out.device);
    out!("spec_source={}", out.spec_source);
    out!("audio_seconds={:.3}", out.audio_seconds);
    out!("language={}", out.language);
    if let Some(p) = out.language_probability {
        out!("language_probability={p:.4}");
    }
    out!("segments={}", out.segments.len());
    for (i, s) in out.segments.iter().enumerate() {
        if timestamps {
            out!("segment.{i}={:.2}-{:.2} {}", s.start, s.end, s.text.trim());
        } else {
            out!("segment.{i}={}", s.text.trim());
        }
    }
    out!("text={}", out.text);
    out!("decode_passes={}", out.decode_passes);
    out!("inference_ms={:.2}", out.inference_ms);
    if out.audio_seconds > 0.0 {
        out!("rtf={:.5}", out.inference_ms / 1000.0 / out.audio_seconds);
    }
    Ok(())
}

fn asr_segments_json(out: &AsrOutput) -> String {
    let segs: Vec<serde_json::Value> = out
        .segments
        .iter()
        .map(|s| serde_json::json!({ "start": s.start, "end": s.end, "text": s.text.trim() }))
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({
        "audio_seconds": out.audio_seconds, "text": out.text, "segments": segs,
    }))
    .expect("serialises")
}

/// VAD segments as every output names them (docs/errors.md): `start` and `end` in
/// seconds, `start_sample` and `end_sample` at the model's rate.
fn vad_segments(out: &VadOutput) -> Vec<serde_json::Value> {
    let rate = out.sample_rate as f64;
    out.segments
        .iter()
        .map(|s| {
            serde_json::json!({
                "start": s.start as f64 / rate, "end": s.end as f64 / rate,
                "start_sample": s.start, "end_sample": s.end,
            })
        })
        .collect()
}

fn segments_json(out: &VadOutput) -> String {
    serde_json::to_string_pretty(
        &serde_json::json!({ "sample_rate": out.sample_rate, "segments": vad_segments(out) }),
    )
    .expect("serialises")
}

fn print_vad(out: &VadOutput) -> Result<(), Failure> {
    let rate = out.sample_rate as f64;
    out!("task=vad");
    out!("family={}", out.family);
    out!("device={}", out.device);
    out!("spec_source={}", out.spec_source);
    out!("audio_seconds={:.3}", out.audio_seconds);
    out!("windows={}", out.probabilities.len());
    out!("segments={}", out.segments.len());
    for (i, s) in out.segments.iter().enumerate() {
        out!(
            "segment.{i}={:.3}-{:.3}",
            s.start as f64 / rate,
            s.end as f64 / rate
        );
    }
    out!("inference_ms={:.2}", out.inference_ms);
    if out.audio_seconds > 0.0 {
        out!("rtf={:.5}", out.inference_ms / 1000.0 / out.audio_seconds);
    }
    Ok(())
}

fn list_devices(json: bool) -> Result<(), Failure> {
    let mut unloadable = backend::unloadable_backends();
    for u in &mut unloadable {
        u.advice = audiocpp_engine::error::spell_parameters(&u.advice, &flag_of);
    }
    let devices = backend::list_devices();
    if json {
        let v = serde_json::json!({
            "compiled_backends": backend::compiled_backends(),
            "cpu_kernels": backend::cpu_kernels(),
            "devices": devices,
            "unloadable_backends": unloadable,
        });
        out!("{}", serde_json::to_string_pretty(&v).expect("serialises"));
        return Ok(());
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

fn list_loaders(json: bool) -> Result<(), Failure> {
    let loaders: Vec<_> = families::all_loaders().collect();
    if json {
        out!(
            "{}",
            serde_json::to_string_pretty(&loaders).expect("serialises")
        );
        return Ok(());
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
