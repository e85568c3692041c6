//! DELETE: removes a stream (soft-deletes it while forks still read it).

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use runnel_core::{Applied, Command};

use super::pin::send_unpins;
use crate::error::ApiError;
use crate::AppState;

pub async fn delete(app: AppState, name: String) -> Result<Response, ApiError> {
    let applied = app.node.propose(Command::Delete { name }).await?;
    // A fork of a stream in another group releases its pin there before
    // the answer, so the source's own deletion is complete when it comes.
    if let Applied::Deleted { released } = applied {
        send_unpins(&app, released).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
