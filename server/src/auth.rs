//! The API key: every `/v1` route needs `Authorization: Bearer <key>` when a key is set
//! (server.json `api_key` or `AUDIOCPP_API_KEY`); `/health` does not.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::AppState;

/// The middleware: answers 401 `invalid_api_key` unless the request carries the key.
pub async fn require_api_key(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if let Some(key) = &state.api_key {
        let given = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        if given != Some(key.as_str()) {
            // Read (and drop) the body first, up to the size limit and the body timeout,
            // so the client gets the 401 instead of a connection reset while it sends.
            let _ = tokio::time::timeout(
                Duration::from_millis(state.cfg.body_timeout_ms),
                axum::body::to_bytes(req.into_body(), state.cfg.max_body_bytes),
            )
            .await;
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_api_key",
                "missing or wrong API key (send Authorization: Bearer <key>)",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The token of an `Authorization: Bearer <token>` header; the scheme name is
/// case-insensitive (RFC 9110), so `bearer` works too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
}
