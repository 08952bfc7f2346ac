//! The server's errors: OpenAI's error body (`ApiError`), the 500 every internal failure
//! answers with, and how an engine error becomes an answer that names request fields and
//! server.json keys, never CLI flags.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// An OpenAI-style error response.
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The request parameter at fault, when one is.
    pub param: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            param: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// The same error again, for another request that fails for the same reason.
    pub fn duplicate(&self) -> Self {
        ApiError {
            message: self.message.clone(),
            ..*self
        }
    }

    /// A 400 naming the parameter at fault.
    pub fn bad_param(param: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param),
            ..Self::bad_request(message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::SERVICE_UNAVAILABLE => "server_busy",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        };
        let body = json!({ "error": { "message": self.message, "type": kind, "param": self.param, "code": self.code } });
        (self.status, Json(body)).into_response()
    }
}

/// A handler's panic as the client sees it: a generic 500; the detail goes to the log.
pub fn panic_response(detail: Box<dyn std::any::Any + Send + 'static>) -> Response {
    eprintln!(
        "error: a request handler panicked: {}",
        panic_text(&*detail)
    );
    internal().into_response()
}

/// The message a panic carries, for the log.
pub fn panic_text(detail: &(dyn std::any::Any + Send)) -> String {
    detail
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| detail.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// The 500 every internal failure answers with; what went wrong is in the log only.
pub fn internal() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal_error",
        "internal server error (the details are in the server log)",
    )
}

/// How the server's errors name an engine parameter
/// ([`audiocpp_engine::error::PARAMETERS`]): a request's JSON (or form) field, or a
/// server.json key; never a CLI flag.
pub fn field_of(parameter: &str) -> Option<String> {
    Some(match parameter {
        p if REQUEST_FIELDS.contains(&p) => format!("field '{p}'"),
        "audio" => "field 'file' (or 'audio_base64')".to_string(),
        "temperature" | "seed" | "max_frames" => format!("field 'options.{parameter}'"),
        "family"
        | "backend"
        | "device"
        | "threads"
        | "model_spec_override"
        | "max_audio_s"
        | "min_sample_rate_hz"
        | "max_speech_s" => format!("server.json key '{parameter}'"),
        _ => return None,
    })
}

/// The engine parameters that are request fields (the rest are server.json keys).
const REQUEST_FIELDS: &[&str] = &[
    "model",
    "language",
    "temperatures",
    "input",
    "voice",
    "speed",
    "instructions",
    "threshold",
    "min_speech_duration_ms",
    "min_silence_duration_ms",
    "speech_pad_ms",
    "max_speech_duration_s",
];

/// An engine error as the server answers it: a user error is a 400 in the server's
/// terms (fields, server.json keys), its `param` the first request field it names; any
/// other is logged and answered 500 without details.
pub fn engine_error(e: audiocpp_engine::EngineError) -> ApiError {
    if e.is_user_error() {
        let message = e.message_in(&field_of);
        let param = audiocpp_engine::error::parameters_named(&e.to_string())
            .into_iter()
            .find(|p| REQUEST_FIELDS.contains(p));
        ApiError {
            param,
            ..ApiError::bad_request(message)
        }
    } else {
        eprintln!("error: inference failed: {e}");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "inference_failed",
            "inference failed (the details are in the server log)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use audiocpp_engine::EngineError;

    #[test]
    fn engine_errors_name_fields_and_keys_never_flags() {
        let e = engine_error(EngineError::Usage(
            "unknown parameter 'language' 'xx': this model knows 99 language codes".into(),
        ));
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param, Some("language"));
        assert_eq!(
            e.message,
            "unknown field 'language' 'xx': this model knows 99 language codes"
        );
        let e = engine_error(EngineError::Usage(
            "the speech passed the limit; raise parameter 'max_speech_s'".into(),
        ));
        assert_eq!(e.param, None, "a config key is no request field");
        assert!(e.message.ends_with("raise server.json key 'max_speech_s'"));
        for p in audiocpp_engine::error::PARAMETERS {
            let text = format!("parameter '{p}' is wrong");
            let spelled = audiocpp_engine::error::spell_parameters(&text, &field_of);
            assert!(!spelled.contains("--"), "{spelled}");
        }
    }
}
