//! How results and failures reach the user: `key=value` lines or pretty JSON on standard
//! output (the [`out!`] macro), and the one error line on standard error (JSON with
//! `--json`).

use std::io::Write as _;

use crate::{usage, Failure};

/// Writes one line of results to standard output. A closed pipe (`audiocpp_cli ... |
/// head`) ends the process quietly with status 0, as SIGPIPE does for C tools; any other
/// write error (a full disk behind a redirect, `/dev/full`) is a failure with exit code 2.
pub fn line(args: std::fmt::Arguments) -> Result<(), Failure> {
    if let Err(e) = writeln!(std::io::stdout().lock(), "{args}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        return Err(usage(format!("cannot write to standard output: {e}")));
    }
    Ok(())
}

/// `println!` for results, through [`line`]; returns the failure from the calling
/// function.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::print::line(format_args!($($arg)*))?
    };
}
pub(crate) use out;

/// Writes `value` to standard output as pretty JSON (through [`line`]).
pub fn json(value: &impl serde::Serialize) -> Result<(), Failure> {
    line(format_args!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialises")
    ))
}

/// Reports a failure on standard error: `error: MESSAGE`, or with `--json` one line
/// `{"error": {"message": ..., "exit_code": ...}}`.
pub fn failure(f: &Failure, json: bool) {
    if json {
        let e = serde_json::json!({ "error": { "message": f.message, "exit_code": f.code } });
        eprintln!("{e}");
    } else {
        eprintln!("error: {}", f.message);
    }
}
