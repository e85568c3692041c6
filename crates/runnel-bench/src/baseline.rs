//! A no-op server on the same HTTP stack as Runnel (hyper through axum):
//! 204 to every POST, PUT and DELETE, an empty 200 to everything else.
//! Benchmarked like a real server, it shows the ceiling of the HTTP path
//! on the machine.

use std::net::SocketAddr;

use axum::http::{Method, StatusCode};
use axum::Router;

use crate::BenchError;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:4438")]
    pub listen: SocketAddr,
}

pub async fn run(args: Args) -> Result<(), BenchError> {
    // The body is read whole, as a real server reads an append: one left
    // unread makes hyper close the connection instead of keeping it.
    let app = Router::new().fallback(|method: Method, _body: axum::body::Bytes| async move {
        match method {
            Method::POST | Method::PUT | Method::DELETE => StatusCode::NO_CONTENT,
            _ => StatusCode::OK,
        }
    });
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("baseline server on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
