//! The one mapping from server errors to HTTP status codes and OpenAI-style
//! error bodies: `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Everything a request can fail with. Messages name the field and echo the
/// bad value so a client can fix its request without reading our code.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON (or not an object).
    #[error("{0}")]
    MalformedJson(String),
    /// A field has the wrong type or an out-of-range value.
    #[error("{message}")]
    InvalidField { param: String, message: String },
    /// Prompt plus `max_tokens` does not fit the model's context; `param`
    /// names the prompt field of the endpoint (`prompt`, `messages`, `text`
    /// or `input_ids`).
    #[error("{message}")]
    ContextLength { param: String, message: String },
    /// `model` names a model this server does not serve.
    #[error("The model `{0}` does not exist; GET /v1/models lists the served model")]
    UnknownModel(String),
    /// The waiting queue is at its bound.
    #[error("server overloaded: the waiting queue is full ({limit} requests); retry later")]
    QueueFull { limit: u32 },
    /// The server is draining for shutdown.
    #[error("server is shutting down and accepts no new requests")]
    ShuttingDown,
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    #[error("request body too large: {0}")]
    PayloadTooLarge(String),
    /// The request body did not arrive in time.
    #[error("request timeout: {0}")]
    RequestTimeout(String),
    /// The engine failed while running the request.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn field(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::InvalidField {
            param: param.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::MalformedJson(_)
            | ApiError::InvalidField { .. }
            | ApiError::ContextLength { .. } => StatusCode::BAD_REQUEST,
            ApiError::UnknownModel(_) | ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::QueueFull { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `type` field.
    pub fn kind(&self) -> &'static str {
        match self {
            ApiError::QueueFull { .. } => "rate_limit_error",
            ApiError::ShuttingDown => "service_unavailable",
            ApiError::Unauthorized(_) => "authentication_error",
            ApiError::Forbidden(_) => "permission_error",
            ApiError::Internal(_) => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// OpenAI's `code` field.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ApiError::MalformedJson(_) => Some("invalid_json"),
            ApiError::InvalidField { .. } => Some("invalid_value"),
            ApiError::ContextLength { .. } => Some("context_length_exceeded"),
            ApiError::UnknownModel(_) => Some("model_not_found"),
            ApiError::QueueFull { .. } => Some("queue_full"),
            _ => None,
        }
    }

    pub fn param(&self) -> Option<&str> {
        match self {
            ApiError::InvalidField { param, .. } | ApiError::ContextLength { param, .. } => {
                Some(param)
            }
            ApiError::UnknownModel(_) => Some("model"),
            _ => None,
        }
    }

    /// The JSON body, also sent as an SSE `data:` line when a stream fails.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.to_string(),
                "type": self.kind(),
                "param": self.param(),
                "code": self.code(),
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut resp = (status, axum::Json(self.body())).into_response();
        if matches!(self, ApiError::QueueFull { .. } | ApiError::ShuttingDown) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if matches!(
            self,
            ApiError::PayloadTooLarge(_) | ApiError::RequestTimeout(_)
        ) {
            // Part of the body may be unread: the connection cannot carry
            // another request, and saying so lets clients read this answer.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// Shortens a client value for an error message (bodies can be megabytes).
pub fn echo(v: &serde_json::Value) -> String {
    let s = v.to_string();
    if s.len() <= 80 {
        s
    } else {
        let mut cut = 77;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}...", &s[..cut])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_follow_openai_shape() {
        let e = ApiError::field("max_tokens", "bad");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let b = e.body();
        assert_eq!(b["error"]["param"], "max_tokens");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert_eq!(ApiError::QueueFull { limit: 3 }.status().as_u16(), 429);
        assert_eq!(ApiError::ShuttingDown.status().as_u16(), 503);
        assert_eq!(ApiError::UnknownModel("x".into()).status().as_u16(), 404);
    }

    #[test]
    fn echo_truncates_on_char_boundary() {
        let v = serde_json::Value::String("é".repeat(100));
        let s = echo(&v);
        assert!(s.ends_with("...") && s.len() <= 80);
    }
}
