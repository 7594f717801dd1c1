//! The error half of every response: a status code with a `{"fault_message": "…"}` body, and
//! the router's fallbacks for unknown paths (404) and methods a path does not take (405).

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::command::ApiError;

/// A failed request, answered as `status` with `{"fault_message": message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, naming the field or resource.
    pub message: String,
}

impl Fault {
    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404 Not Found.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 413 Payload Too Large.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body over {limit} bytes"),
        )
    }

    /// 408 Request Timeout.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::REQUEST_TIMEOUT, message)
    }

    /// 500 Internal Server Error.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl From<ApiError> for Fault {
    fn from(e: ApiError) -> Self {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Self::new(status, e.to_string())
    }
}

/// The body of every error (Firecracker's `Error`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[schema(as = Fault)]
pub struct FaultBody {
    /// What went wrong, naming the field or resource.
    pub fault_message: String,
}

impl IntoResponse for Fault {
    fn into_response(self) -> Response {
        let body = FaultBody {
            fault_message: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

/// The router's fallback when the path exists but not with this method (axum adds `Allow`).
pub async fn method_not_allowed(request: Request) -> Fault {
    Fault::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "method {} not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}
