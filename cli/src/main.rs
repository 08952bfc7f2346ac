//! `audiocpp_cli`: run audio models from the command line.
//!
//! Thin by design: parse flags (audio.cpp's flag names, `flags.rs`), hand each task to
//! its module (`vad`, `asr`, `tts`, `convert`, `info`, and `list` for the listings),
//! which calls the engine and prints `key=value` lines or JSON (`print`), and map
//! errors to exit codes here (2 for bad input).

mod asr;
mod convert;
mod flags;
mod info;
mod list;
mod print;
mod tts;
mod vad;

use std::path::Path;
use std::process::ExitCode;

use audiocpp_engine::families;
use audiocpp_engine::output;
use audiocpp_engine::task::Task;
use audiocpp_engine::EngineError;
use clap::Parser;

use flags::{flag_of, CliTask, Flags};

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
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

impl Failure {
    /// The failure with `flag: ` before its message, naming the flag whose value failed.
    fn of_flag(self, flag: &str) -> Failure {
        Failure {
            message: format!("{flag}: {}", self.message),
            ..self
        }
    }
}

/// Refuses, before any model loads, an output file `flag` names that could not be
/// written (no such folder, a directory, a folder that may not be written), so no work
/// runs only to be thrown away at the end; the message names the flag.
pub fn check_output(flag: &str, path: Option<&Path>) -> Result<(), Failure> {
    match path {
        Some(p) => output::check_writable(p)
            .map(drop)
            .map_err(|e| Failure::from(e).of_flag(flag)),
        None => Ok(()),
    }
}

/// A result file: its flag, the path given (if any) and how to make its content.
pub type ResultFile<'a> = (&'a str, Option<&'a Path>, &'a dyn Fn() -> String);

/// Writes the result files `files` (flag, path, content) and then prints the result with
/// `print`, even when a file could not be written (a disk that filled up during the
/// work): the first write failure is returned after the print, saying that the result
/// is on standard output (`what`: "the transcript is"), so a finished result is never
/// lost.
pub fn write_then_print(
    files: &[ResultFile],
    what: &str,
    print: impl FnOnce() -> Result<(), Failure>,
) -> Result<(), Failure> {
    let mut unwritten = None;
    for (flag, path, content) in files {
        let Some(path) = path else { continue };
        if let Err(e) = output::write_bytes(path, content().as_bytes()) {
            unwritten.get_or_insert(Failure::from(e).of_flag(flag));
        }
    }
    print()?;
    match unwritten {
        Some(f) => Err(Failure {
            message: format!("{}; {what} on standard output", f.message),
            ..f
        }),
        None => Ok(()),
    }
}

/// A usage or input error: exit code 2.
pub fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: 2,
        message: message.into(),
    }
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
            print::failure(&f, json);
            ExitCode::from(f.code)
        }
    }
}

/// Checks what every task needs (a task, a known family, a model that exists), then
/// dispatches.
fn run(flags: Flags) -> Result<(), Failure> {
    if flags.list_devices {
        return list::devices(flags.json);
    }
    if flags.list_loaders {
        return list::loaders(flags.json);
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
            return Err(usage(format!(
                "--task is required ({}); see --help",
                CliTask::names(", ")
            )))
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
    let folder_ok = task == Task::Convert.name() && model.is_dir();
    if !model.is_file() && !folder_ok {
        return Err(usage(format!(
            "--model '{}' does not exist or is not a file",
            model.display()
        )));
    }
    match task.parse::<CliTask>()? {
        CliTask::Run(Task::Vad) => vad::run(&flags, family, model),
        CliTask::Run(Task::Asr) => asr::run(&flags, family, model),
        CliTask::Run(Task::Tts) => tts::run(&flags, family, model),
        CliTask::Run(Task::Convert) => convert::run(&flags, family, model),
        CliTask::Info => info::run(&flags, family, model),
    }
}
