//! DELETE: removes a stream (soft-deletes it while forks still read it).

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use runnel_core::Command;

use crate::error::ApiError;
use crate::AppState;

pub async fn delete(app: AppState, name: String) -> Result<Response, ApiError> {
    app.node.propose(Command::Delete { name }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
