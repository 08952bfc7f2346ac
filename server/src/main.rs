//! `audiocpp_server`: a local HTTP server over the engine with OpenAI-style endpoints.
//!
//! Thin by design: this file reads the flags and the config and starts serving; the
//! model pool (`pool`: loading, one request at a time per model, a busy model answering
//! 503 `server_busy` after `busy_timeout_ms`), errors (`error`), body limits (`body`)
//! and the API key (`auth`) sit below one module per route (`health`, `models`,
//! `transcriptions`, `realtime` (live transcription over a WebSocket), `tasks_run`, `speech` (its FLAC answers by `flac`), `voices` over the `voice_store`). All audio work is the engine's, run off the
//! async workers on blocking threads.

mod auth;
mod batch;
mod body;
mod config;
mod error;
mod flac;
mod formats;
mod health;
mod languages;
mod listener;
mod models;
mod pool;
mod realtime;
mod speech;
mod tasks_run;
mod transcriptions;
mod voice_store;
mod voices;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use audiocpp_engine::backend::{BackendKind, RuntimeOptions};
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method};
use axum::middleware;
use axum::routing::{delete, get, post};
use axum::Router;
use clap::Parser;
use config::Config;
use tower_http::cors::AllowOrigin;

/// Command-line flags (each overrides the config file's value).
#[derive(Debug, Parser)]
#[command(name = "audiocpp_server", version = audiocpp_engine::VERSION, about = "OpenAI-compatible audio server on the audiocpp engine")]
struct Flags {
    /// Configuration file (host, port, backend, models...).
    #[arg(long)]
    config: PathBuf,
    /// Address to bind.
    #[arg(long)]
    host: Option<String>,
    /// Port to bind (0: any free port).
    #[arg(long)]
    port: Option<u32>,
    /// Backend: cpu, cuda, hip (rocm), vulkan, metal, best.
    #[arg(long)]
    backend: Option<String>,
    /// Device index among the backend's devices.
    #[arg(long)]
    device: Option<usize>,
    /// The most CPU threads per inference (fewer while other programs take the cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// Shared server state.
pub struct AppState {
    cfg: Config,
    slots: BTreeMap<String, pool::Slot>,
    api_key: Option<String>,
    runtime: RuntimeOptions,
    /// When the server started (Unix seconds): the `created` of its model objects.
    started_unix_s: u64,
    /// The stored voices, when `voices_dir` is set.
    voices: Option<std::sync::Mutex<voice_store::VoiceStore>>,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    audiocpp_engine::error::set_warning_spelling(error::field_of);
    let mut cfg = match Config::load(&flags.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(h) = flags.host {
        cfg.host = h;
    }
    if let Some(p) = flags.port {
        cfg.port = p;
    }
    if let Some(b) = flags.backend {
        cfg.backend = b;
    }
    if flags.device.is_some() {
        cfg.device = flags.device;
    }
    if let Some(t) = flags.threads {
        cfg.threads = t;
    }
    if let Err(e) = cfg.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(serve(cfg));
    // A synthesis cut at shutdown stops at its next piece of audio; the exit does not
    // wait for a long one (a blocking thread still running is ended with the process).
    rt.shutdown_timeout(EXIT_GRACE);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// How long the exit waits for blocking work still running once serving has stopped.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// Loads the models, binds the address and serves until a shutdown signal.
async fn serve(cfg: Config) -> Result<(), String> {
    let runtime = RuntimeOptions {
        backend: cfg
            .backend
            .parse::<BackendKind>()
            .map_err(|e| e.to_string())?,
        device: cfg.device,
        threads: cfg.threads,
    };
    let api_key = match cfg.api_key.clone() {
        Some(k) => Some(k),
        None => match std::env::var("AUDIOCPP_API_KEY") {
            Ok(k) if k.is_empty() => {
                return Err("AUDIOCPP_API_KEY is set but empty: set a key or unset it".into())
            }
            Ok(k) => Some(k),
            Err(_) => None,
        },
    };
    let voices = voices::open_store(&cfg)?;
    if voices.is_some() && api_key.is_none() {
        eprintln!(
            "warning: voices_dir is set but there is no api_key: the voices API answers 403 until one is set"
        );
    }
    let slots = pool::slots(&cfg.models, &runtime).await?;
    let addr = format!("{}:{}", cfg.host, cfg.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    if api_key.is_none() && !local.ip().is_loopback() {
        eprintln!(
            "warning: listening on {local}, beyond this machine, with no api_key: anyone who can reach it can use it (set api_key in the config or AUDIOCPP_API_KEY)"
        );
    }
    let limits = listener::ConnectionLimits {
        max_connections: cfg.max_connections,
        header_timeout: Duration::from_millis(cfg.header_timeout_ms),
        shutdown_timeout: Duration::from_millis(cfg.shutdown_timeout_ms),
    };
    let state = Arc::new(AppState {
        cfg,
        slots,
        api_key,
        runtime,
        started_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        voices,
    });
    let app = router(state.clone());
    println!("audiocpp_server listening on http://{local}");
    listener::serve(listener, app, limits, shutdown_signal()).await;
    eprintln!("audiocpp_server stopped");
    Ok(())
}

/// The routes, behind the API key (`/v1`), the body limit, the panic catcher and CORS.
fn router(state: Arc<AppState>) -> Router {
    let v1 = Router::new()
        .route("/v1/models", get(models::list_models))
        .route("/v1/models/{id}", get(models::get_model))
        .route("/v1/tasks/run", post(tasks_run::run_task))
        .route(
            "/v1/audio/transcriptions",
            post(transcriptions::transcriptions),
        )
        .route("/v1/audio/speech", post(speech::speech))
        .route("/v1/realtime", get(realtime::realtime))
        .route(
            "/v1/audio/voices",
            post(voices::create_voice).get(voices::list_voices),
        )
        .route("/v1/audio/voices/{id}", delete(voices::delete_voice))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_api_key,
        ));
    let mut app = Router::new()
        .route("/health", get(health::health))
        .merge(v1)
        .layer(DefaultBodyLimit::max(state.cfg.max_body_bytes))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            error::panic_response,
        ))
        .with_state(state.clone());
    if !state.cfg.cors_origins.is_empty() {
        // `*` is tower-http's "any" (a list holding it panics); the config check keeps
        // it the only entry and every other entry a valid origin.
        let origins = if state.cfg.cors_origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(
                state
                    .cfg
                    .cors_origins
                    .iter()
                    .filter_map(|o| o.parse::<HeaderValue>().ok()),
            )
        };
        app = app.layer(
            tower_http::cors::CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([Method::GET, Method::POST, Method::DELETE])
                .allow_headers([
                    axum::http::header::CONTENT_TYPE,
                    axum::http::header::AUTHORIZATION,
                ]),
        );
    }
    app
}

/// Resolves on Ctrl-C or SIGTERM; in-flight requests then finish (`listener`).
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("audiocpp_server: shutting down, finishing in-flight requests");
}

#[cfg(test)]
mod package_readme_tests {
    use super::*;

    /// The package README's server commands (`packaging/readme/package.md`) parse, and its
    /// server.json loads: every key is one of [`Config`]'s, every model's family and task
    /// are this build's (with empty files for its models). A renamed flag or key fails
    /// here, not for a new user of the package.
    #[test]
    fn the_package_readme_server_commands_and_config_are_this_servers() {
        let commands = audiocpp_test_support::package_readme_commands("{{server}}");
        assert!(!commands.is_empty());
        for c in &commands {
            let args = std::iter::once("audiocpp_server").chain(c[1..].iter().map(String::as_str));
            Flags::try_parse_from(args).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        }
        let blocks = audiocpp_test_support::package_readme_json_blocks();
        assert_eq!(blocks.len(), 1, "one sample server.json: {blocks:?}");
        let dir = tempfile::tempdir().unwrap();
        let v: serde_json::Value = serde_json::from_str(&blocks[0]).unwrap();
        for m in v["models"].as_array().unwrap() {
            for key in ["path", "vad_model"] {
                if let Some(p) = m[key].as_str() {
                    let p = dir.path().join(p);
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(p, b"").unwrap();
                }
            }
        }
        let config = dir.path().join("server.json");
        std::fs::write(&config, &blocks[0]).unwrap();
        let cfg = Config::load(&config).unwrap();
        assert_eq!(cfg.models.len(), v["models"].as_array().unwrap().len());
    }
}
