//! The connection layer: accepts TCP connections, caps how many are open, serves each
//! with hyper's HTTP/1 under a header (and idle keep-alive) timeout, and shuts down
//! gracefully.
//!
//! axum's own `serve` has no timeouts and no cap: slow clients sending a header byte
//! by byte were never closed, about a thousand idle sockets locked everyone out, and a
//! half-sent request kept SIGTERM from finishing. Here a connection over the cap gets
//! an immediate 503 and is closed; a connection that sends no complete request header
//! within `header_timeout_ms` (a new one, or an idle keep-alive one between requests)
//! is closed; on shutdown the listener stops, idle connections close at once, requests
//! in flight are answered (a request stays in flight until its response body is written
//! out, so a streamed answer runs to its end), and whatever is still open after
//! `shutdown_timeout_ms` is dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt as _;

/// Connection limits and timeouts (from server.json).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Most connections open at once; more get a 503 and are closed.
    pub max_connections: usize,
    /// Time a connection may take to send a complete request header, and may stay idle
    /// between keep-alive requests.
    pub header_timeout: Duration,
    /// Time given to connections still open after a shutdown signal.
    pub shutdown_timeout: Duration,
}

/// After a shutdown signal, how long a connection with no request in flight keeps its
/// socket, so a response already handed to hyper is written out.
const FLUSH_GRACE: Duration = Duration::from_millis(500);

/// One request in flight on a connection, from its head's arrival until its response
/// body is written out or dropped (the connection closed): counted in the connection's
/// counter while it lives.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(count: &Arc<AtomicUsize>) -> InFlight {
        count.fetch_add(1, Ordering::SeqCst);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request [`InFlight`] until hyper has taken its last
/// frame (hyper drops a body then) or drops it unfinished. Its size and end are the
/// inner body's, so a whole answer keeps its `content-length`.
struct Tracked {
    body: axum::body::Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The answer to a connection over the cap, written raw: no request is parsed for it.
fn over_capacity_response(max: usize) -> Vec<u8> {
    let body = format!(
        "{{\"error\":{{\"message\":\"the server has {max} connections open (max_connections); retry later\",\"type\":\"server_busy\",\"param\":null,\"code\":\"too_many_connections\"}}}}"
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Answers a connection over the cap and closes it.
async fn refuse(mut stream: TcpStream, max: usize) {
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = stream.write_all(&over_capacity_response(max)).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Serves `app` on `listener` until `shutdown` completes, then drains as described in
/// the module doc.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                eprintln!("audiocpp_server: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            connections.spawn(refuse(stream, limits.max_connections));
            continue;
        };
        let in_flight = Arc::new(AtomicUsize::new(0));
        let service = {
            let (app, in_flight) = (app.clone(), in_flight.clone());
            hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let app = app.clone();
                let guard = InFlight::new(&in_flight);
                async move {
                    let resp = app.oneshot(req.map(axum::body::Body::new)).await?;
                    // The request stays in flight until its body is written out: a
                    // streamed answer's body outlives the handler by minutes.
                    Ok::<_, std::convert::Infallible>(resp.map(|body| Tracked {
                        body,
                        _in_flight: guard,
                    }))
                }
            })
        };
        let mut stop = stop_rx.clone();
        connections.spawn(async move {
            let _permit = permit;
            let _ = stream.set_nodelay(true);
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                // The realtime endpoint's WebSocket takes the connection over.
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.wait_for(|s| *s) => {}
            }
            conn.as_mut().graceful_shutdown();
            // A request in flight is answered; a connection with none (idle, or a
            // client still sending a header) is closed once a written response had
            // time to leave.
            let started = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    _ = conn.as_mut() => return,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                let idle = in_flight.load(Ordering::SeqCst) == 0;
                if idle && started.elapsed() >= FLUSH_GRACE {
                    return;
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(limits.shutdown_timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        eprintln!(
            "audiocpp_server: {} connection(s) still open after {} ms; closing them",
            connections.len(),
            limits.shutdown_timeout.as_millis()
        );
        connections.abort_all();
    }
}
