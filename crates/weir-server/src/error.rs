//! The API's errors: JSON with a stable `code`, a `message`, and for SQL errors the `line` and
//! `column`. Every refusal of a request is a 4xx; a 5xx means weir itself failed.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable: `sql_syntax`, `sql_invalid`, `bad_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `conflict`, `payload_too_large`, `internal`.
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, body: ErrorBody { code, message: message.into(), line: None, column: None } }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid 'Authorization: Bearer <token>' header is required",
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl From<weir_sql::Error> for ApiError {
    fn from(error: weir_sql::Error) -> Self {
        match error {
            weir_sql::Error::Syntax { message, line, column } => Self {
                status: StatusCode::BAD_REQUEST,
                body: ErrorBody { code: "sql_syntax", message, line: Some(line), column: Some(column) },
            },
            weir_sql::Error::Located { message, line, column } => Self {
                status: StatusCode::BAD_REQUEST,
                body: ErrorBody { code: "sql_invalid", message, line: Some(line), column: Some(column) },
            },
            // Planning failures, unknown options, DataFusion's type errors: the statement is
            // at fault, not the service.
            other => Self::new(StatusCode::BAD_REQUEST, "sql_invalid", other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}
