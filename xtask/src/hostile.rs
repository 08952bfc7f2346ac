//! The hostile-input suite of `cargo xtask test`: mutated GGUF models and WAV files run
//! against the real CLI and server, asserting that no input makes a process die on a
//! signal, panic, hang or grow past [`MAX_RSS_KIB`], that bad input gets exit code 2
//! (or a 4xx), and that the server still answers `/health` afterwards.
//!
//! Mutants come from seeded, deterministic mutators ([`gguf_mutants`], [`wav_mutants`])
//! that know the two formats' layouts, so most mutants hit a field (a count, a length,
//! a dimension, an offset, a sample rate) rather than tensor data. Counts and times are
//! bounded: a few hundred mutants per parser, each run under [`RUN_TIMEOUT`].

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// Peak resident memory any probed process may reach (1 GiB).
pub const MAX_RSS_KIB: u64 = 1 << 20;
/// Longest one CLI run may take before it counts as a hang.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// GGUF mutants run through the CLI.
pub const GGUF_MUTANTS: usize = 320;
/// WAV mutants run through the CLI and sent to the server.
pub const WAV_MUTANTS: usize = 320;
/// GGUF mutants served as lazy models (each loaded by one request).
pub const SERVER_GGUF_MUTANTS: usize = 40;
/// The RNG seed: the same mutants every run.
pub const SEED: u64 = 0x5eed_a0d1_0c99;

/// A small deterministic RNG (SplitMix64): mutants must be the same on every run.
pub struct Rng(u64);

impl Rng {
    /// Starts from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Values that break code which trusts a header: zero, one, off by one, powers of two
/// around allocation limits, all ones.
const HOSTILE_U64: [u64; 12] = [
    0,
    1,
    2,
    3,
    0xff,
    1 << 16,
    1 << 27,
    1 << 31,
    1 << 32,
    1 << 40,
    u64::MAX / 2,
    u64::MAX,
];

/// A field of a seed file that mutators target: its offset and width in bytes.
#[derive(Debug, Clone, Copy)]
struct Field {
    at: usize,
    width: usize,
}

/// The fields of a GGUF file's header, metadata and tensor table, found by walking it.
fn gguf_fields(b: &[u8]) -> Result<(Vec<Field>, Vec<Field>, usize)> {
    let u32_at = |p: usize| -> Result<u32> {
        Ok(u32::from_le_bytes(
            b.get(p..p + 4).context("seed truncated")?.try_into()?,
        ))
    };
    let u64_at = |p: usize| -> Result<u64> {
        Ok(u64::from_le_bytes(
            b.get(p..p + 8).context("seed truncated")?.try_into()?,
        ))
    };
    let mut header = vec![
        Field { at: 4, width: 4 },
        Field { at: 8, width: 8 },
        Field { at: 16, width: 8 },
    ];
    let n_tensors = u64_at(8)? as usize;
    let n_kv = u64_at(16)? as usize;
    let mut p = 24;
    let mut values = Vec::new();
    for _ in 0..n_kv {
        header.push(Field { at: p, width: 8 });
        p += 8 + u64_at(p)? as usize;
        header.push(Field { at: p, width: 4 });
        let t = u32_at(p)?;
        p += 4;
        p = skip_gguf_value(b, p, t, &mut values, &mut header)?;
    }
    let mut table = Vec::new();
    for _ in 0..n_tensors {
        table.push(Field { at: p, width: 8 });
        p += 8 + u64_at(p)? as usize;
        table.push(Field { at: p, width: 4 });
        let n_dims = u32_at(p)? as usize;
        p += 4;
        for _ in 0..n_dims {
            table.push(Field { at: p, width: 8 });
            p += 8;
        }
        table.push(Field { at: p, width: 4 });
        table.push(Field {
            at: p + 4,
            width: 8,
        });
        p += 12;
    }
    header.extend(values);
    Ok((header, table, p))
}

/// Skips one metadata value, recording its length fields and scalar values.
fn skip_gguf_value(
    b: &[u8],
    mut p: usize,
    t: u32,
    values: &mut Vec<Field>,
    lengths: &mut Vec<Field>,
) -> Result<usize> {
    let size = |t: u32| match t {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    };
    let u64_at = |p: usize| -> Result<u64> {
        Ok(u64::from_le_bytes(
            b.get(p..p + 8).context("seed truncated")?.try_into()?,
        ))
    };
    if let Some(w) = size(t) {
        values.push(Field { at: p, width: w });
        return Ok(p + w);
    }
    match t {
        8 => {
            lengths.push(Field { at: p, width: 8 });
            Ok(p + 8 + u64_at(p)? as usize)
        }
        9 => {
            lengths.push(Field { at: p, width: 4 });
            let et = u32::from_le_bytes(b.get(p..p + 4).context("seed truncated")?.try_into()?);
            lengths.push(Field {
                at: p + 4,
                width: 8,
            });
            let n = u64_at(p + 4)? as usize;
            p += 12;
            for _ in 0..n {
                p = skip_gguf_value(b, p, et, &mut Vec::new(), &mut Vec::new())?;
            }
            Ok(p)
        }
        _ => bail!("seed GGUF has value type {t}"),
    }
}

/// Writes `v` into a field (little-endian, cut to its width).
fn poke(bytes: &mut [u8], f: Field, v: u64) {
    bytes[f.at..f.at + f.width].copy_from_slice(&v.to_le_bytes()[..f.width]);
}

/// A hostile or random value for a field.
fn hostile_value(rng: &mut Rng, f: Field, bytes: &[u8]) -> u64 {
    let mut cur = [0u8; 8];
    cur[..f.width].copy_from_slice(&bytes[f.at..f.at + f.width]);
    let cur = u64::from_le_bytes(cur);
    match rng.below(4) {
        0 => rng.pick(&HOSTILE_U64),
        1 => cur.wrapping_add(1),
        2 => cur.wrapping_sub(1),
        _ => rng.next_u64(),
    }
}

/// `n` labelled mutants of a GGUF file: header counts and version, metadata lengths,
/// types and values, tensor names, dimension counts, dimensions, types and offsets
/// (the last tensor claiming 2^27 elements among them), truncations and byte flips.
pub fn gguf_mutants(seed: &[u8], n: usize, rng: &mut Rng) -> Result<Vec<(String, Vec<u8>)>> {
    let (header, table, table_end) = gguf_fields(seed)?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut b = seed.to_vec();
        let label = match i % 6 {
            0 => {
                let f = header[rng.below(header.len())];
                let v = hostile_value(rng, f, &b);
                poke(&mut b, f, v);
                format!("header/metadata field at {} = {v:#x}", f.at)
            }
            1 | 2 => {
                let f = table[rng.below(table.len())];
                let v = hostile_value(rng, f, &b);
                poke(&mut b, f, v);
                format!("tensor table field at {} = {v:#x}", f.at)
            }
            3 => {
                // The last tensor's first dimension claims a huge element count.
                let last_dims = table.len().saturating_sub(3);
                let f = table[last_dims.min(table.len() - 1)];
                let v = rng.pick(&[1u64 << 27, (1 << 27) + 32, 1 << 33, 1 << 40]);
                poke(&mut b, f, v);
                format!("last tensor dims at {} = {v:#x}", f.at)
            }
            4 => {
                let cut = if rng.below(2) == 0 {
                    rng.below(table_end + 64)
                } else {
                    rng.below(b.len())
                };
                b.truncate(cut);
                format!("truncated at {cut}")
            }
            _ => {
                let flips = 1 + rng.below(8);
                for _ in 0..flips {
                    let at = rng.below(table_end);
                    b[at] ^= 1 << rng.below(8);
                }
                format!("{flips} bit flips in the tables")
            }
        };
        out.push((label, b));
    }
    Ok(out)
}

/// The fields of a canonical 44-byte-header WAV: RIFF size, fmt size, format tag,
/// channels, rate, byte rate, block align, bits, data size.
const WAV_FIELDS: [Field; 9] = [
    Field { at: 4, width: 4 },
    Field { at: 16, width: 4 },
    Field { at: 20, width: 2 },
    Field { at: 22, width: 2 },
    Field { at: 24, width: 4 },
    Field { at: 28, width: 4 },
    Field { at: 32, width: 2 },
    Field { at: 34, width: 2 },
    Field { at: 40, width: 4 },
];

/// `n` labelled mutants of a 16-bit PCM WAV file: rates (1 Hz among them), channel
/// counts, bit depths, format tags, chunk sizes, truncations and byte flips.
pub fn wav_mutants(seed: &[u8], n: usize, rng: &mut Rng) -> Result<Vec<(String, Vec<u8>)>> {
    if seed.len() < 44 || &seed[0..4] != b"RIFF" || &seed[36..40] != b"data" {
        bail!("the WAV seed must have the canonical 44-byte header");
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut b = seed.to_vec();
        let label = match i % 5 {
            0 => {
                let rate = rng.pick(&[0u64, 1, 2, 100, 3999, 4000, 8000, 1 << 20, u32::MAX as u64]);
                poke(&mut b, WAV_FIELDS[4], rate);
                format!("sample rate {rate}")
            }
            1 | 2 => {
                let f = WAV_FIELDS[rng.below(WAV_FIELDS.len())];
                let v = hostile_value(rng, f, &b);
                poke(&mut b, f, v);
                format!("header field at {} = {v:#x}", f.at)
            }
            3 => {
                let within = if rng.below(2) == 0 { 64 } else { b.len() };
                let cut = rng.below(within);
                b.truncate(cut);
                format!("truncated at {cut}")
            }
            _ => {
                let flips = 1 + rng.below(6);
                for _ in 0..flips {
                    let at = rng.below(44);
                    b[at] ^= 1 << rng.below(8);
                }
                format!("{flips} bit flips in the header")
            }
        };
        out.push((label, b));
    }
    Ok(out)
}

/// How one probed process ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Exit code, `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Peak resident memory in KiB.
    pub max_rss_kib: u64,
    /// Standard error.
    pub stderr: String,
    /// Whether it ran past [`RUN_TIMEOUT`] and was killed.
    pub timed_out: bool,
}

/// GNU time, which reports a child's peak memory (`%M`, KiB) from `wait4`.
const GNU_TIME: &str = "/usr/bin/time";
/// The line GNU time is told to print last.
const RSS_TAG: &str = "hostile-max-rss-kib=";

/// Runs `program args` to its end under GNU time (killed after `timeout`), with its
/// exit code or signal and its peak memory. GNU time and the program run in a process
/// group of their own, so the watchdog kills the program too, not GNU time alone (which
/// would leave the program holding stderr open and this function waiting on it).
fn run_measured(program: &Path, args: &[&std::ffi::OsStr], timeout: Duration) -> Result<Outcome> {
    let mut child = Command::new(GNU_TIME);
    std::os::unix::process::CommandExt::process_group(&mut child, 0);
    let mut child = child
        .arg("-f")
        .arg(format!("{RSS_TAG}%M"))
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {GNU_TIME} (apt-get install time)"))?;
    let mut stderr = child.stderr.take().context("probe stderr")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if t0.elapsed() > timeout {
            timed_out = true;
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = reader.join().unwrap_or_default();
    let max_rss_kib = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(RSS_TAG))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    // GNU time says "Command terminated by signal N" and exits 128 + N.
    let signal = stderr
        .lines()
        .find_map(|l| l.strip_prefix("Command terminated by signal "))
        .and_then(|n| n.trim().parse().ok())
        .or(if timed_out { Some(9) } else { None });
    stderr = stderr
        .lines()
        .filter(|l| {
            !l.starts_with(RSS_TAG)
                && !l.starts_with("Command terminated by signal")
                && !l.starts_with("Command exited with non-zero status")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    Ok(Outcome {
        code: if signal.is_some() {
            None
        } else {
            status.code()
        },
        signal,
        max_rss_kib,
        stderr,
        timed_out,
    })
}

/// A running process's peak resident memory so far, in KiB (Linux `VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// What the suite found.
#[derive(Debug, Default)]
pub struct Tally {
    /// Processes and requests probed.
    pub probes: usize,
    /// Processes ended by a signal.
    pub signals: usize,
    /// Processes or responses that showed a panic.
    pub panics: usize,
    /// Worst peak resident memory seen, in KiB.
    pub worst_rss_kib: u64,
    /// Every failed assertion, one line each.
    pub failures: Vec<String>,
    /// How many runs ended with each exit code, and requests with each HTTP status
    /// (`http 400`...): shows that the mutants reach the error paths.
    pub outcomes: std::collections::BTreeMap<String, usize>,
}

impl Tally {
    /// Records one CLI run; `ok_codes` are the exit codes allowed.
    fn cli(&mut self, label: &str, o: &Outcome, ok_codes: &[i32]) {
        self.probes += 1;
        let outcome = match (o.code, o.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("signal {s}"),
            (None, None) => "unknown".into(),
        };
        *self.outcomes.entry(outcome).or_default() += 1;
        self.worst_rss_kib = self.worst_rss_kib.max(o.max_rss_kib);
        let mut fail = |what: String| self.failures.push(format!("{label}: {what}"));
        if let Some(sig) = o.signal {
            fail(format!(
                "killed by signal {sig}{}",
                if o.timed_out {
                    " (hung; killed by the watchdog)"
                } else {
                    ""
                }
            ));
        }
        if o.stderr.contains("panicked") {
            fail(format!("panicked: {}", o.stderr.trim()));
        }
        if let Some(code) = o.code.filter(|c| !ok_codes.contains(c)) {
            fail(format!("exit code {code}: {}", o.stderr.trim()));
        }
        if o.max_rss_kib > MAX_RSS_KIB {
            fail(format!("peak RSS {} MiB", o.max_rss_kib / 1024));
        }
        if o.code == Some(2) && o.stderr.lines().filter(|l| l.starts_with("error:")).count() != 1 {
            fail(format!("not one error line: {}", o.stderr.trim()));
        }
        self.signals += usize::from(o.signal.is_some());
        self.panics += usize::from(o.stderr.contains("panicked"));
    }
}

impl Tally {
    /// Records one HTTP request; `allowed` says which statuses pass.
    fn http(&mut self, label: &str, r: Result<(u16, String)>, allowed: &dyn Fn(u16) -> bool) {
        self.probes += 1;
        match r {
            Ok((status, body)) => {
                *self.outcomes.entry(format!("http {status}")).or_default() += 1;
                if !allowed(status) {
                    self.failures
                        .push(format!("{label}: status {status}: {body}"));
                }
                if body.contains("panicked") {
                    self.panics += 1;
                    self.failures
                        .push(format!("{label}: panic text reached the client: {body}"));
                }
            }
            Err(e) => self.failures.push(format!("{label}: {e:#}")),
        }
    }
}

/// A minimal HTTP/1.1 request on a fresh loopback connection: status and body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(RUN_TIMEOUT))?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).context("reading the response")?;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| {
            format!(
                "no status line in {:?}",
                text.chars().take(80).collect::<String>()
            )
        })?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// A multipart body with a `model` field and a `file` part.
fn multipart(model: &str, file: &[u8]) -> (String, Vec<u8>) {
    let boundary = "hostileboundary93c1";
    let mut b = format!("--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{model}\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n").into_bytes();
    b.extend(file);
    b.extend(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), b)
}

/// Where the suite finds its inputs.
pub struct Inputs {
    /// The built `audiocpp_cli`.
    pub cli: PathBuf,
    /// The built `audiocpp_server`.
    pub server: PathBuf,
    /// The pinned test assets (Silero model, clips).
    pub assets: PathBuf,
    /// The repo's `model_specs/`.
    pub specs: PathBuf,
    /// A scratch folder for mutants.
    pub work: PathBuf,
}

/// The CLI arguments of a one-thread `--task <task> --family <family>` run of `model`,
/// then `rest` (its input and output flags).
fn one_thread_args<'a>(
    task: &'a str,
    family: &'a str,
    model: &'a Path,
    rest: impl IntoIterator<Item = &'a std::ffi::OsStr>,
) -> Vec<&'a std::ffi::OsStr> {
    let mut v: Vec<&std::ffi::OsStr> = [
        "--task",
        task,
        "--family",
        family,
        "--threads",
        "1",
        "--model",
    ]
    .into_iter()
    .map(std::ffi::OsStr::new)
    .collect();
    v.push(model.as_os_str());
    v.extend(rest);
    v
}

/// The CLI arguments of a one-thread VAD run.
fn vad_args<'a>(model: &'a Path, audio: &'a Path) -> Vec<&'a std::ffi::OsStr> {
    one_thread_args(
        "vad",
        "silero_vad",
        model,
        [std::ffi::OsStr::new("--audio"), audio.as_os_str()],
    )
}

/// Runs the whole suite and returns its tally (failures included, not raised).
pub fn run(inp: &Inputs) -> Result<Tally> {
    std::fs::create_dir_all(&inp.work)?;
    let mut tally = Tally::default();
    let mut rng = Rng::new(SEED);
    let silero_bin = inp.assets.join("ggml-silero-v6.2.0.bin");
    let clip = inp.assets.join("clips/silence.wav");
    let seed_gguf = inp.work.join("seed.gguf");
    let status = Command::new(&inp.cli)
        .args(["--task", "convert", "--family", "silero_vad", "--model"])
        .arg(&silero_bin)
        .arg("--out")
        .arg(&seed_gguf)
        .arg("--model-spec-override")
        .arg(&inp.specs)
        .stdout(Stdio::null())
        .status()
        .context("converting the Silero seed to GGUF")?;
    anyhow::ensure!(status.success(), "converting the Silero seed failed");
    let gguf_seed = std::fs::read(&seed_gguf)?;
    let wav_seed = std::fs::read(&clip).with_context(|| format!("reading {}", clip.display()))?;
    let mutant = inp.work.join("mutant");

    for (label, bytes) in gguf_mutants(&gguf_seed, GGUF_MUTANTS, &mut rng)? {
        std::fs::write(&mutant, &bytes)?;
        let o = run_measured(&inp.cli, &vad_args(&mutant, &clip), RUN_TIMEOUT)?;
        tally.cli(&format!("cli gguf {label}"), &o, &[0, 2]);
    }
    for (label, bytes) in wav_mutants(&wav_seed, WAV_MUTANTS, &mut rng)? {
        std::fs::write(&mutant, &bytes)?;
        let o = run_measured(&inp.cli, &vad_args(&seed_gguf, &mutant), RUN_TIMEOUT)?;
        tally.cli(&format!("cli wav {label}"), &o, &[0, 2]);
    }
    server_probes(inp, &seed_gguf, &gguf_seed, &wav_seed, &mut rng, &mut tally)?;
    tts_probes(inp, &mut tally)?;
    Ok(tally)
}

/// One server: the seed model plus lazy GGUF mutants, sent WAV mutants and one request
/// per mutant model, then `/health`, then SIGTERM; its own exit and memory are checked.
fn server_probes(
    inp: &Inputs,
    seed_gguf: &Path,
    gguf_seed: &[u8],
    wav_seed: &[u8],
    rng: &mut Rng,
    tally: &mut Tally,
) -> Result<()> {
    let mut models = vec![serde_json::json!({
        "id": "seed", "path": seed_gguf, "family": "silero_vad", "task": "vad",
    })];
    let gguf = gguf_mutants(gguf_seed, SERVER_GGUF_MUTANTS, rng)?;
    for (i, (_, bytes)) in gguf.iter().enumerate() {
        let p = inp.work.join(format!("lazy{i}.gguf"));
        std::fs::write(&p, bytes)?;
        models.push(serde_json::json!({
            "id": format!("m{i}"), "path": p, "family": "silero_vad", "task": "vad", "lazy": true,
        }));
    }
    let cfg = inp.work.join("server.json");
    std::fs::write(
        &cfg,
        serde_json::to_string(&serde_json::json!({
            "port": 0, "threads": 1, "models": models,
            "model_spec_override": null, "max_body_bytes": 16 << 20,
        }))?
        .replace(",\"model_spec_override\":null", ""),
    )?;
    let (child, addr, log) = start_server(&inp.server, &cfg)?;
    let mut check = |label: String, r: Result<(u16, String)>, allowed: &dyn Fn(u16) -> bool| {
        tally.http(&label, r, allowed)
    };
    let started = Instant::now();
    for (label, bytes) in wav_mutants(wav_seed, WAV_MUTANTS, rng)? {
        let (ct, body) = multipart("seed", &bytes);
        let r = http(&addr, "POST", "/v1/tasks/run", &ct, &body);
        check(format!("server wav {label}"), r, &|s| {
            s == 200 || (400..500).contains(&s)
        });
    }
    for (i, (label, _)) in gguf.iter().enumerate() {
        let (ct, body) = multipart(&format!("m{i}"), wav_seed);
        let r = http(&addr, "POST", "/v1/tasks/run", &ct, &body);
        // A mutant that still loads answers 200; one that fails is marked failed (503).
        check(format!("server lazy gguf {label}"), r, &|s| {
            s == 200 || s == 503
        });
    }
    let r = http(&addr, "GET", "/health", "text/plain", b"");
    check("server /health after the mutants".into(), r, &|s| s == 200);
    eprintln!(
        "hostile: {} server requests in {:.1} s",
        WAV_MUTANTS + gguf.len() + 1,
        started.elapsed().as_secs_f64()
    );
    stop_server(child, log, tally)
}

/// Starts the server on the config file `cfg`: the process, its `127.0.0.1:PORT` from
/// the banner, and a thread collecting its log.
fn start_server(
    server: &Path,
    cfg: &Path,
) -> Result<(std::process::Child, String, std::thread::JoinHandle<String>)> {
    let mut child = Command::new(server)
        .arg("--config")
        .arg(cfg)
        .env_remove("AUDIOCPP_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting audiocpp_server")?;
    let mut banner = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().context("server stdout")?),
        &mut banner,
    )?;
    let addr = banner
        .trim()
        .rsplit("http://")
        .next()
        .filter(|a| a.starts_with("127.0.0.1:"))
        .with_context(|| format!("unexpected server banner {banner:?}"))?
        .to_string();
    let mut stderr = child.stderr.take().context("server stderr")?;
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    Ok((child, addr, log))
}

/// Sends the server SIGTERM and checks that it exits 0 within [`RUN_TIMEOUT`], within
/// [`MAX_RSS_KIB`], with no panic in its log.
fn stop_server(
    mut child: std::process::Child,
    log: std::thread::JoinHandle<String>,
    tally: &mut Tally,
) -> Result<()> {
    let max_rss_kib = peak_rss_kib(child.id());
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .context("sending SIGTERM to the server")?;
    anyhow::ensure!(term.success(), "kill -TERM failed");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if t0.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            tally
                .failures
                .push("server did not stop within 30 s of SIGTERM".into());
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let log = log.join().unwrap_or_default();
    let o = Outcome {
        code: status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(&status),
        max_rss_kib,
        stderr: String::new(),
        timed_out: false,
    };
    tally.cli("server after SIGTERM", &o, &[0]);
    if log.contains("panicked") {
        tally.panics += 1;
        tally
            .failures
            .push(format!("server log shows a panic: {log}"));
    }
    Ok(())
}

/// Kokoro GGUF mutants of its header and tables (the tensor data kept), run through
/// `--task tts`.
pub const KOKORO_GGUF_MUTANTS: usize = 10;
/// Where the Kokoro GGUF is cut for the truncation probes, as fractions of its length
/// (0 is an empty file).
const KOKORO_CUTS: [f64; 5] = [0.0, 0.001, 0.25, 0.5, 0.999];

/// The arguments of a one-thread `--task tts --family kokoro` run of `model` into `out`,
/// then `extra`.
fn tts_args<'a>(
    model: &'a Path,
    out: &'a Path,
    extra: &'a [std::ffi::OsString],
) -> Vec<&'a std::ffi::OsStr> {
    let rest = [std::ffi::OsStr::new("--out"), out.as_os_str()]
        .into_iter()
        .chain(extra.iter().map(|a| a.as_os_str()));
    one_thread_args("tts", "kokoro", model, rest)
}

/// Runs one TTS probe into an empty folder: exit code in `ok_codes`, and a failed run
/// leaves the folder empty (no output, no temporary file).
fn tts_probe(
    inp: &Inputs,
    tally: &mut Tally,
    label: &str,
    model: &Path,
    extra: &[std::ffi::OsString],
    ok_codes: &[i32],
) -> Result<()> {
    let dir = inp.work.join("tts-out");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("out.wav");
    let o = run_measured(&inp.cli, &tts_args(model, &out, extra), RUN_TIMEOUT)?;
    tally.cli(&format!("cli tts {label}"), &o, ok_codes);
    if o.code != Some(0) {
        let left: Vec<String> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !left.is_empty() {
            tally
                .failures
                .push(format!("cli tts {label}: a failed run left {left:?}"));
        }
    }
    Ok(())
}

/// The exit codes of a probe that must be refused.
const REFUSED: &[i32] = &[2];
/// The exit codes of a probe that may be spoken or refused.
const SPOKEN_OR_REFUSED: &[i32] = &[0, 2];

/// `--task tts` and `POST /v1/audio/speech` on Kokoro (f16, converted here from the
/// pinned assets): hostile text, text files, speeds, voices and phonemes through the
/// CLI, truncated and mutated model files, and hostile speech requests to a server.
fn tts_probes(inp: &Inputs, tally: &mut Tally) -> Result<()> {
    use std::ffi::OsString;
    let started = Instant::now();
    let src = inp.assets.join("kokoro");
    let kokoro = inp.work.join("kokoro-f16.gguf");
    let status = Command::new(&inp.cli)
        .args(["--task", "convert", "--family", "kokoro", "--model"])
        .arg(src.join("kokoro.onnx"))
        .arg("--voices")
        .arg(src.join("voices"))
        .arg("--vocab")
        .arg(inp.assets.join("kokoro-vocab.json"))
        .arg("--lexicons")
        .arg(inp.assets.join("misaki"))
        .args(["--quantize", "f16", "--out"])
        .arg(&kokoro)
        .arg("--model-spec-override")
        .arg(&inp.specs)
        .stdout(Stdio::null())
        .status()
        .context("converting Kokoro for the TTS probes")?;
    anyhow::ensure!(status.success(), "converting Kokoro (f16) failed");
    let os = |args: &[&str]| -> Vec<OsString> { args.iter().map(OsString::from).collect() };
    let text_file = inp.work.join("tts-text");
    let file_arg = |extra: &[&str]| {
        let mut v = os(&["--text-file"]);
        v.push(text_file.clone().into_os_string());
        v.extend(os(extra));
        v
    };

    // Text and phonemes given on the command line.
    let mut invalid_utf8 = os(&["--text"]);
    invalid_utf8.push(std::os::unix::ffi::OsStringExt::from_vec(
        b"Hello \xff\xfe there.".to_vec(),
    ));
    let many_sentences = "Hi. ".repeat(2500);
    let argv_cases: Vec<(&str, Vec<OsString>, &[i32])> = vec![
        ("empty --text", os(&["--text", ""]), REFUSED),
        ("blank --text", os(&["--text", " \t\n "]), REFUSED),
        ("invalid UTF-8 --text", invalid_utf8, REFUSED),
        (
            "punctuation-only --text",
            os(&["--text", "?!... ,;:"]),
            SPOKEN_OR_REFUSED,
        ),
        (
            "control characters in --text",
            os(&["--text", "Hi\u{7}\u{1b}[2J\u{8}."]),
            SPOKEN_OR_REFUSED,
        ),
        (
            "10,000 characters of 2,500 sentences, 1 s speech limit",
            os(&["--text", many_sentences.as_str(), "--max-speech-s", "1"]),
            REFUSED,
        ),
        ("--speed 0", os(&["--text", "Hi.", "--speed", "0"]), REFUSED),
        ("--speed -1", os(&["--text", "Hi.", "--speed=-1"]), REFUSED),
        (
            "--speed NaN",
            os(&["--text", "Hi.", "--speed", "NaN"]),
            REFUSED,
        ),
        (
            "--speed inf",
            os(&["--text", "Hi.", "--speed", "inf"]),
            REFUSED,
        ),
        (
            "--speed 1e9",
            os(&["--text", "Hi.", "--speed", "1e9"]),
            REFUSED,
        ),
        (
            "--speed 1e-9",
            os(&["--text", "Hi.", "--speed", "1e-9"]),
            REFUSED,
        ),
        (
            "--speed 4.01",
            os(&["--text", "Hi.", "--speed", "4.01"]),
            REFUSED,
        ),
        (
            "--speed text",
            os(&["--text", "Hi.", "--speed", "fast"]),
            REFUSED,
        ),
        (
            "--max-speech-s 0",
            os(&["--text", "Hi.", "--max-speech-s", "0"]),
            REFUSED,
        ),
        (
            "--max-speech-s NaN",
            os(&["--text", "Hi.", "--max-speech-s", "NaN"]),
            REFUSED,
        ),
        (
            "unknown --voice",
            os(&["--text", "Hi.", "--voice", "zz_nobody"]),
            REFUSED,
        ),
        (
            "empty --voice",
            os(&["--text", "Hi.", "--voice", ""]),
            REFUSED,
        ),
        (
            "path as --voice",
            os(&["--text", "Hi.", "--voice", "../../etc/passwd"]),
            REFUSED,
        ),
        (
            "--phonemes of unknown symbols",
            os(&["--phonemes", "QXQ☃§"]),
            REFUSED,
        ),
        ("blank --phonemes", os(&["--phonemes", "   "]), REFUSED),
        (
            "--text and --phonemes",
            os(&["--text", "Hi.", "--phonemes", "hˈI"]),
            REFUSED,
        ),
    ];
    for (label, extra, ok) in &argv_cases {
        tts_probe(inp, tally, label, &kokoro, extra, ok)?;
    }

    // Text files.
    let mut rng = Rng::new(SEED ^ 0x7755);
    let binary: Vec<u8> = (0..4096).map(|_| rng.next_u64() as u8 | 0x80).collect();
    /// A text file probe: label, the file's bytes, the arguments, the exit codes allowed.
    type FileCase<'a> = (&'a str, Vec<u8>, Vec<OsString>, &'a [i32]);
    let file_cases: Vec<FileCase> = vec![
        ("empty text file", Vec::new(), file_arg(&[]), REFUSED),
        ("binary text file", binary, file_arg(&[]), REFUSED),
        (
            "invalid UTF-8 text file",
            b"Good \xc3\x28 morning.".to_vec(),
            file_arg(&[]),
            REFUSED,
        ),
        (
            "NUL bytes in a text file",
            b"Hello\0 there.\0\0".to_vec(),
            file_arg(&[]),
            SPOKEN_OR_REFUSED,
        ),
        (
            "only NUL bytes in a text file",
            vec![0u8; 64],
            file_arg(&[]),
            SPOKEN_OR_REFUSED,
        ),
        (
            "text file over 1 MiB",
            b"a ".repeat((1 << 19) + 1),
            file_arg(&[]),
            REFUSED,
        ),
    ];
    for (label, bytes, extra, ok) in &file_cases {
        std::fs::write(&text_file, bytes)?;
        tts_probe(inp, tally, label, &kokoro, extra, ok)?;
    }
    let missing = inp.work.join("no-such-text.txt");
    let mut args = os(&["--text-file"]);
    args.push(missing.into_os_string());
    tts_probe(inp, tally, "missing text file", &kokoro, &args, REFUSED)?;
    let mut args = os(&["--text-file"]);
    args.push(inp.work.clone().into_os_string());
    tts_probe(inp, tally, "a folder as text file", &kokoro, &args, REFUSED)?;

    // Truncated and mutated model files.
    let seed = std::fs::read(&kokoro)?;
    let (_, _, table_end) = gguf_fields(&seed)?;
    let mutant = inp.work.join("kokoro-mutant.gguf");
    let hi = os(&["--text", "Hi."]);
    for cut in KOKORO_CUTS {
        let at = (seed.len() as f64 * cut) as usize;
        std::fs::write(&mutant, &seed[..at])?;
        tts_probe(
            inp,
            tally,
            &format!("Kokoro GGUF cut at {at}"),
            &mutant,
            &hi,
            REFUSED,
        )?;
    }
    std::fs::write(&mutant, &seed[..table_end])?;
    tts_probe(
        inp,
        tally,
        "Kokoro GGUF without its tensor data",
        &mutant,
        &hi,
        REFUSED,
    )?;
    let tables = &seed[..table_end];
    for (label, bytes) in gguf_mutants(tables, KOKORO_GGUF_MUTANTS, &mut rng)? {
        let mut f = std::fs::File::create(&mutant)?;
        f.write_all(&bytes)?;
        if !label.starts_with("truncated") {
            f.write_all(&seed[table_end..])?;
        }
        drop(f);
        tts_probe(
            inp,
            tally,
            &format!("Kokoro GGUF {label}"),
            &mutant,
            &hi,
            SPOKEN_OR_REFUSED,
        )?;
    }
    std::fs::remove_file(&mutant)?;
    eprintln!(
        "hostile: TTS CLI probes in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    tts_server_probes(inp, &kokoro, tally)
}

/// Hostile `POST /v1/audio/speech` requests to a server speaking with `kokoro`: bad
/// JSON, wrong types, over-long input, out-of-range speeds, unknown voices and formats,
/// an oversized body; each a 4xx with an OpenAI error body naming the reason, then a
/// good request still speaks and `/health` answers.
fn tts_server_probes(inp: &Inputs, kokoro: &Path, tally: &mut Tally) -> Result<()> {
    let cfg = inp.work.join("tts-server.json");
    std::fs::write(
        &cfg,
        serde_json::to_string(&serde_json::json!({
            "port": 0, "threads": 1, "max_body_bytes": 1 << 20,
            "models": [{ "id": "kokoro", "path": kokoro, "family": "kokoro", "task": "tts" }],
        }))?,
    )?;
    let (child, addr, log) = start_server(&inp.server, &cfg)?;
    let json = "application/json";
    let speak = |body: &[u8]| http(&addr, "POST", "/v1/audio/speech", json, body);
    let over_long = serde_json::json!({ "model": "kokoro", "input": "a".repeat(4097) });
    let huge = serde_json::json!({ "model": "kokoro", "input": "a ".repeat(1 << 20) });
    let raw: Vec<(&str, Vec<u8>)> = vec![
        ("empty body", Vec::new()),
        (
            "truncated JSON",
            br#"{"model": "kokoro", "input": "#.to_vec(),
        ),
        ("JSON null", b"null".to_vec()),
        ("JSON array", br#"["kokoro", "Hi."]"#.to_vec()),
        ("binary body", (0u8..=255).cycle().take(4096).collect()),
        (
            "NaN speed",
            br#"{"model": "kokoro", "input": "Hi.", "speed": NaN}"#.to_vec(),
        ),
        (
            "speed 1e400",
            br#"{"model": "kokoro", "input": "Hi.", "speed": 1e400}"#.to_vec(),
        ),
        (
            "invalid UTF-8 in the JSON",
            b"{\"model\": \"kokoro\", \"input\": \"Hi \xff.\"}".to_vec(),
        ),
        ("4097-character input", over_long.to_string().into_bytes()),
        (
            "2 MiB body over max_body_bytes",
            huge.to_string().into_bytes(),
        ),
    ];
    let fields: Vec<(&str, serde_json::Value)> = vec![
        (
            "input a number",
            serde_json::json!({ "model": "kokoro", "input": 5 }),
        ),
        (
            "input null",
            serde_json::json!({ "model": "kokoro", "input": null }),
        ),
        (
            "input an array",
            serde_json::json!({ "model": "kokoro", "input": ["Hi."] }),
        ),
        ("no input", serde_json::json!({ "model": "kokoro" })),
        (
            "empty input",
            serde_json::json!({ "model": "kokoro", "input": "" }),
        ),
        (
            "blank input",
            serde_json::json!({ "model": "kokoro", "input": " \n\t " }),
        ),
        (
            "model a number",
            serde_json::json!({ "model": 1, "input": "Hi." }),
        ),
        ("no model", serde_json::json!({ "input": "Hi." })),
        (
            "unknown model",
            serde_json::json!({ "model": "nope", "input": "Hi." }),
        ),
        (
            "speed a string",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "speed": "fast" }),
        ),
        (
            "speed 0",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "speed": 0 }),
        ),
        (
            "speed -1",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "speed": -1 }),
        ),
        (
            "speed 1e9",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "speed": 1e9 }),
        ),
        (
            "speed 1e-9",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "speed": 1e-9 }),
        ),
        (
            "voice a number",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "voice": 3 }),
        ),
        (
            "unknown voice",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "voice": "zz_nobody" }),
        ),
        (
            "empty voice",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "voice": "" }),
        ),
        (
            "format mp3",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "response_format": "mp3" }),
        ),
        (
            "unknown format",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "response_format": "xyz" }),
        ),
        (
            "format a number",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "response_format": 7 }),
        ),
        (
            "unknown stream format",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "stream_format": "carrier-pigeon" }),
        ),
        (
            "unknown field",
            serde_json::json!({ "model": "kokoro", "input": "Hi.", "pitch": 2 }),
        ),
    ];
    let cases = raw.into_iter().chain(
        fields
            .into_iter()
            .map(|(l, v)| (l, v.to_string().into_bytes())),
    );
    // A 4xx names its reason in an OpenAI error body.
    let reasoned = |body: &str| -> bool {
        serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(|m| !m.is_empty()))
            .unwrap_or(false)
    };
    for (label, body) in cases {
        let r = speak(&body[..]);
        let named = matches!(&r, Ok((_, b)) if reasoned(b));
        tally.http(&format!("server tts {label}"), r, &|s| {
            (400..500).contains(&s)
        });
        if !named {
            tally.failures.push(format!(
                "server tts {label}: no error message in the answer"
            ));
        }
    }
    let r = http(&addr, "POST", "/v1/audio/speech", "text/plain", b"Hi.");
    tally.http("server tts a text/plain body", r, &|s| {
        (400..500).contains(&s)
    });
    let good = serde_json::json!({ "model": "kokoro", "input": "Hi.", "response_format": "wav" });
    let r = speak(good.to_string().as_bytes());
    let spoke = matches!(&r, Ok((200, b)) if b.starts_with("RIFF"));
    tally.http(
        "server tts a good request after the hostile ones",
        r,
        &|s| s == 200,
    );
    if !spoke {
        tally
            .failures
            .push("server tts: the good request got no WAV".into());
    }
    let r = http(&addr, "GET", "/health", "text/plain", b"");
    tally.http("server /health after the TTS probes", r, &|s| s == 200);
    stop_server(child, log, tally)
}

/// `cargo xtask test`'s entry: runs the suite on the release binaries, prints the
/// counts, and fails with every failed assertion listed.
pub fn run_suite(assets: &Path) -> Result<()> {
    let root = crate::project::project_root();
    let bin = crate::project::target_dir().join("release");
    let inp = Inputs {
        cli: bin.join("audiocpp_cli"),
        server: bin.join("audiocpp_server"),
        assets: assets.to_path_buf(),
        specs: root.join("model_specs"),
        work: crate::project::target_dir().join("tmp/hostile"),
    };
    let t0 = Instant::now();
    let tally = run(&inp)?;
    eprintln!(
        "hostile: {} probes, {} signals, {} panics, worst RSS {} MiB, {} failures, {:.1} s",
        tally.probes,
        tally.signals,
        tally.panics,
        tally.worst_rss_kib / 1024,
        tally.failures.len(),
        t0.elapsed().as_secs_f64()
    );
    eprintln!("hostile: outcomes {:?}", tally.outcomes);
    if !tally.failures.is_empty() {
        for f in tally.failures.iter().take(40) {
            eprintln!("hostile: FAIL {f}");
        }
        bail!("{} hostile-input probes failed", tally.failures.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_gguf() -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(3u64.to_le_bytes());
        b.extend(b"key");
        b.extend(4u32.to_le_bytes());
        b.extend(7u32.to_le_bytes());
        b.extend(1u64.to_le_bytes());
        b.extend(b"t");
        b.extend(1u32.to_le_bytes());
        b.extend(8u64.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.resize(64 + 32, 0);
        b
    }

    #[test]
    fn mutants_are_deterministic_and_hit_every_kind() {
        let seed = tiny_gguf();
        let a = gguf_mutants(&seed, 60, &mut Rng::new(1)).unwrap();
        let b = gguf_mutants(&seed, 60, &mut Rng::new(1)).unwrap();
        assert_eq!(a, b);
        assert!(a.iter().all(|(_, m)| m != &seed || m.len() != seed.len()) || a.len() == 60);
        for kind in [
            "header/metadata",
            "tensor table",
            "last tensor dims",
            "truncated",
            "bit flips",
        ] {
            assert!(a.iter().any(|(l, _)| l.contains(kind)), "{kind}");
        }
    }

    /// The TTS probes alone, for working on them (`cargo xtask test` runs them with the
    /// rest): after `cargo build --release -p audiocpp-cli -p audiocpp-server`,
    /// `AUDIOCPP_TEST_ASSETS=DIR cargo test -p xtask --profile xtask --lib tts_probes_alone
    /// -- --ignored --nocapture`.
    #[test]
    #[ignore = "needs the release CLI and server and the Kokoro test assets"]
    fn tts_probes_alone() {
        let assets = std::env::var_os("AUDIOCPP_TEST_ASSETS")
            .map(PathBuf::from)
            .expect("AUDIOCPP_TEST_ASSETS names the test assets");
        let bin = crate::project::target_dir().join("release");
        let inp = Inputs {
            cli: bin.join("audiocpp_cli"),
            server: bin.join("audiocpp_server"),
            assets,
            specs: crate::project::project_root().join("model_specs"),
            work: crate::project::target_dir().join("tmp/hostile-tts"),
        };
        std::fs::create_dir_all(&inp.work).unwrap();
        let mut tally = Tally::default();
        tts_probes(&inp, &mut tally).unwrap();
        eprintln!(
            "hostile tts: {} probes, {} signals, {} panics, worst RSS {} MiB, outcomes {:?}",
            tally.probes,
            tally.signals,
            tally.panics,
            tally.worst_rss_kib / 1024,
            tally.outcomes
        );
        assert!(tally.failures.is_empty(), "{:#?}", tally.failures);
    }

    #[test]
    fn wav_mutants_change_the_header() {
        let mut wav = b"RIFF\0\0\0\0WAVEfmt ".to_vec();
        wav.extend(16u32.to_le_bytes());
        wav.extend([1, 0, 1, 0]);
        wav.extend(16000u32.to_le_bytes());
        wav.extend(32000u32.to_le_bytes());
        wav.extend([2, 0, 16, 0]);
        wav.extend(b"data");
        wav.extend(8u32.to_le_bytes());
        wav.extend([0u8; 8]);
        let m = wav_mutants(&wav, 50, &mut Rng::new(7)).unwrap();
        assert!(m.iter().any(|(l, _)| l == "sample rate 1"));
        assert!(m.iter().filter(|(_, b)| b != &wav).count() > 40);
        assert!(wav_mutants(b"not a wav", 1, &mut Rng::new(7)).is_err());
    }
}
