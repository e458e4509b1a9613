//! The API's errors: a status and a JSON body `{"error": {"code", "message"}}`
//! ([`ErrorBody`]).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leasehold::{ControlError, EngineError, StoreError};
use serde::{Deserialize, Serialize};

/// A request the server refuses, or could not serve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable snake_case code: `bad_request`, `not_found`, `conflict`, …
    pub code: &'static str,
    /// What was wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 404: no run of that id — never, or no longer: a finished run is
    /// deleted once its retention has passed, and the message says so.
    pub fn unknown_run(run_id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "no run {run_id}: there never was one, or it finished longer ago than its \
                 retention (executor.retention, or its flow's retention) and was deleted"
            ),
        )
    }

    /// 409: the run is not in a state the request applies to.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 500: the store failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

/// The body of every answer the API refuses or fails with, whatever its
/// status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What was refused, and why.
    pub error: ErrorDetail,
}

/// An error's code and message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// A stable snake_case code: `bad_request`, `not_found`, `conflict`, …
    pub code: String,
    /// What was wrong, for a person.
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        Self::internal(error.to_string())
    }
}

impl From<ControlError> for ApiError {
    fn from(error: ControlError) -> Self {
        match error {
            ControlError::Gone { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                error.to_string(),
            ),
            _ => Self::conflict(error.to_string()),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::NotFound(run_id) => Self::unknown_run(&run_id),
            EngineError::Flow(_) | EngineError::Config(_) | EngineError::UnknownToolServer(_) => {
                Self::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_flow",
                    error.to_string(),
                )
            }
            EngineError::Held { .. } | EngineError::Finished { .. } => {
                Self::conflict(error.to_string())
            }
            EngineError::ToolClient { .. } => {
                Self::new(StatusCode::BAD_GATEWAY, "tool_server", error.to_string())
            }
            // This server runs nothing: no model is configured.
            EngineError::NoModel(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_model",
                error.to_string(),
            ),
            EngineError::Fork(_) => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_fork",
                error.to_string(),
            ),
            _ => Self::internal(error.to_string()),
        }
    }
}
