//! ggml's log, routed through the engine: quiet by default, everything with
//! [`set_verbose`] (the CLI's `--verbose`) or `AUDIOCPP_LOG` set.
//!
//! ggml prints the real reason for many failures (which GGUF field is wrong, which
//! allocation failed) as log lines before it returns an error code. Printed as they
//! come, they appear before the front end's own `error:` line and break the "one line
//! per error" rule; dropped, the reason is lost. So the last error-level line is kept
//! ([`take_last_error`]) for the engine to put into its own error.

use std::ffi::CStr;
use std::io::Write as _;
use std::os::raw::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use llama_cpp_sys_2 as sys;

static VERBOSE: AtomicBool = AtomicBool::new(false);
static LAST_ERROR: Mutex<String> = Mutex::new(String::new());

/// Shows every ggml log line on stderr (`--verbose`); otherwise none is shown.
pub fn set_verbose(on: bool) {
    VERBOSE.store(on, Ordering::Relaxed);
}

/// True when ggml's log is shown (`--verbose` or `AUDIOCPP_LOG`): models print their
/// own diagnostics (such as time breakdowns) only then.
pub fn verbose() -> bool {
    VERBOSE.load(Ordering::Relaxed) || std::env::var_os("AUDIOCPP_LOG").is_some()
}

/// The last error-level line ggml logged since the previous call, trimmed.
pub fn take_last_error() -> Option<String> {
    let mut last = LAST_ERROR.lock().unwrap_or_else(|e| e.into_inner());
    let s = std::mem::take(&mut *last);
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// Prints, as one `warning:` line, the first error ggml logged while loading the
/// backend libraries: a quiet log must not hide that a GPU backend failed to load
/// (a missing runtime DLL, an old driver), since the run then falls back to the CPU.
pub fn report_backend_load_errors() {
    if let Some(e) = take_last_error() {
        if !verbose() {
            let _ = writeln!(
                std::io::stderr(),
                "warning: a ggml backend failed to load ({e}); AUDIOCPP_LOG=1 shows ggml's whole log"
            );
        }
    }
}

fn record(level: sys::ggml_log_level, msg: &str) {
    if verbose() {
        let _ = write!(std::io::stderr(), "{msg}");
    }
    if level >= sys::GGML_LOG_LEVEL_ERROR {
        let mut last = LAST_ERROR.lock().unwrap_or_else(|e| e.into_inner());
        // ggml's reason comes first; its follow-up lines ("failed to read header")
        // only say where it gave up.
        if last.is_empty() {
            last.push_str(msg.trim());
        }
    }
}

/// The callback ggml calls for every log line.
///
/// # Safety
/// `text` is null or a NUL-terminated string valid for the call, as ggml guarantees.
pub(crate) unsafe extern "C" fn callback(
    level: sys::ggml_log_level,
    text: *const c_char,
    _user: *mut c_void,
) {
    if text.is_null() {
        return;
    }
    // SAFETY: ggml passes a NUL-terminated string valid for this call (checked non-null).
    let msg = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    // No panic may unwind into C: whatever goes wrong while logging is dropped.
    let _ = std::panic::catch_unwind(|| record(level, &msg));
}
