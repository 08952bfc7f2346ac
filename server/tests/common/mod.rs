//! What the server's integration tests share: the workspace's test support (assets, the
//! test venv's Python, word error rates), Whisper tiny.en converted by the engine, the
//! real server binary started on a free loopback port (and killed when the test lets go
//! of it), and a request helper that hands back every answer, whatever its status. One
//! copy, so a change to how the server starts or answers is made once.

#![allow(dead_code, unused_imports)]

pub mod realtime;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};

pub use audiocpp_test_support::{python, root, wer, words};

/// The pinned test assets (`cargo xtask test` fetches them); fails loudly when
/// `required` (a path inside them) is missing.
pub fn assets(required: &str) -> PathBuf {
    audiocpp_test_support::assets(&[required])
}

/// Whisper tiny.en converted from the pinned CTranslate2 model by the engine into
/// `dir/tiny.en.gguf`; returns its path.
pub fn whisper_tiny_gguf(dir: &Path) -> PathBuf {
    let gguf = dir.join("tiny.en.gguf");
    audiocpp_engine::tasks::convert(
        "whisper",
        &assets("whisper-tiny.en-ct2/model.bin").join("whisper-tiny.en-ct2"),
        None,
        &gguf,
        &Default::default(),
    )
    .unwrap();
    gguf
}

/// The committed random-weight Qwen3-TTS Base checkpoint's folder
/// (`engine/tests/fixtures/qwen3_tts_clone`: `base/`, `ref_24k.wav` and what it says).
pub fn qwen3_clone_fixtures() -> PathBuf {
    root().join("engine/tests/fixtures/qwen3_tts_clone")
}

/// That Base checkpoint converted by the engine into `dir/base.gguf`; returns its path.
pub fn qwen3_base_gguf(dir: &Path) -> PathBuf {
    let gguf = dir.join("base.gguf");
    audiocpp_engine::tasks::convert(
        "qwen3_tts",
        &qwen3_clone_fixtures().join("base"),
        None,
        &gguf,
        &Default::default(),
    )
    .unwrap();
    gguf
}

/// Kokoro q8_0 converted by the engine from the pinned sources (the int8 ONNX, every
/// voice, the vocabulary and lexicons) with the repository's specs, cached in this
/// crate's test scratch folder and made again when the test binary (which holds the
/// converter) or the spec changed: a stamp beside it records both.
pub fn kokoro_q8_gguf() -> PathBuf {
    let (onnx, sources) = audiocpp_test_support::kokoro_sources();
    let specs = audiocpp_test_support::specs();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("server-kokoro-q8_0.gguf");
    let exe = std::env::current_exe().unwrap();
    audiocpp_test_support::cached(&out, &[&exe, &specs.join("kokoro.json")], |out| {
        let options = audiocpp_engine::families::ConvertOptions {
            quantize: Some("q8_0".into()),
            sources,
        };
        audiocpp_engine::tasks::convert("kokoro", &onnx, Some(&specs), out, &options)
            .unwrap_or_else(|e| panic!("converting Kokoro (q8_0): {e}"));
    })
}

/// Writes `config` as `server.json` in `dir`; returns its path.
pub fn write_config(dir: &Path, config: &serde_json::Value) -> PathBuf {
    let p = dir.join("server.json");
    std::fs::write(&p, serde_json::to_string_pretty(config).unwrap()).unwrap();
    p
}

/// The server binary on the config file `config`, without an API key from the
/// environment (a test that wants one puts it in the config).
pub fn server_command(config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_audiocpp_server"));
    cmd.arg("--config")
        .arg(config)
        .env_remove("AUDIOCPP_API_KEY");
    cmd
}

/// Runs the server on `config` to its end (for configs it must refuse).
pub fn run_to_exit(config: &Path) -> Output {
    server_command(config).output().unwrap()
}

/// A running server binary; killed and reaped on drop.
pub struct Server {
    /// The process, for tests that signal or wait on it.
    pub child: Child,
    /// `http://127.0.0.1:PORT`, from the banner.
    pub base: String,
    /// A folder (config, models) that must outlive the process.
    dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Writes `config` (its `port` should be 0: a free port) into `dir` and starts the
    /// server on it.
    pub fn start(dir: &Path, config: &serde_json::Value) -> Server {
        Server::spawn(&mut server_command(&write_config(dir, config)))
    }

    /// Starts `cmd` (from [`server_command`], perhaps with more environment or a piped
    /// stderr) and waits until it is ready: its banner names the address it listens on,
    /// printed once the port is bound.
    pub fn spawn(cmd: &mut Command) -> Server {
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line.trim().rsplit(' ').next().unwrap_or("").to_string();
        let server = Server {
            child,
            base,
            dir: None,
        };
        assert!(
            server.base.starts_with("http://127.0.0.1:"),
            "unexpected banner: {line:?}"
        );
        server
    }

    /// Keeps `dir` until the server is gone.
    pub fn owning(mut self, dir: tempfile::TempDir) -> Server {
        self.dir = Some(dir);
        self
    }

    /// The URL of `path` (which starts with `/`) on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends the server SIGTERM (its graceful shutdown).
    pub fn terminate(&self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid}: {sent:?}");
    }

    /// Waits for the process to exit, failing with `what` past `limit`.
    pub fn exit_within(&mut self, limit: std::time::Duration, what: &str) -> ExitStatus {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(code) = self.child.try_wait().unwrap() {
                return code;
            }
            assert!(t0.elapsed() < limit, "{what} (after {limit:?})");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Kills the server; returns what it wrote to stderr when that was piped.
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let mut log = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            stderr.read_to_string(&mut log).unwrap();
        }
        let _ = self.child.wait();
        log
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `body` with `content_type` to `req`; the answer whatever its status (a
/// transport failure panics, naming `req`'s URL).
pub fn send(req: ureq::Request, content_type: &str, body: &[u8]) -> ureq::Response {
    let url = req.url().to_string();
    match req.set("Content-Type", content_type).send_bytes(body) {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{url}: {e}"),
    }
}

/// A whole answer: status, content type, every header and the body.
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// A response header's value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }
}

/// POSTs `body` as JSON to `path` on `server`; the whole answer, whatever its status.
pub fn post_json(server: &Server, path: &str, body: &serde_json::Value) -> Answer {
    let resp = send(
        ureq::post(&server.url(path)),
        "application/json",
        body.to_string().as_bytes(),
    );
    let status = resp.status();
    let content_type = resp.content_type().to_string();
    let headers = resp
        .headers_names()
        .into_iter()
        .map(|n| (n.clone(), resp.header(&n).unwrap_or_default().to_string()))
        .collect();
    let mut body = Vec::new();
    resp.into_reader().read_to_end(&mut body).unwrap();
    Answer {
        status,
        content_type,
        headers,
        body,
    }
}

/// A `multipart/form-data` body: its content type, and the text `fields` followed by
/// the file part `file` (file name, bytes) if any.
pub fn multipart(fields: &[(&str, &str)], file: Option<(&str, &[u8])>) -> (String, Vec<u8>) {
    let boundary = "audiocppboundary7d1f";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    if let Some((name, bytes)) = file {
        body.extend(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: audio/wav\r\n\r\n").as_bytes());
        body.extend(bytes);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}
