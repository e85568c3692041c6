//! The HTTP client of `runnel stream`: one server (`--target`), HTTP or
//! HTTPS (`--ca`, else the system's CAs), a bearer token when given, and
//! errors mapped to the exit codes scripts test.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Exit codes: 0 success; these otherwise (2 is clap's usage error).
pub mod exit {
    /// The server could not be reached, or failed (5xx, or an answer this
    /// client cannot read).
    pub const FAILED: u8 = 1;
    pub const NOT_FOUND: u8 = 3;
    /// 409: exists with another configuration, closed, or a conflict.
    pub const CONFLICT: u8 = 4;
    /// 401 or 403.
    pub const DENIED: u8 = 5;
    /// Any other refusal (400, 413, ...).
    pub const REFUSED: u8 = 6;
}

/// A failure as `runnel stream` reports it: one line, one exit code.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    pub fn failed(message: impl Into<String>) -> CliError {
        CliError {
            code: exit::FAILED,
            message: message.into(),
        }
    }

    /// An error answer, with the server's one-line reason.
    pub fn of_status(status: StatusCode, what: &str, reason: &str) -> CliError {
        let code = match status.as_u16() {
            404 => exit::NOT_FOUND,
            409 => exit::CONFLICT,
            401 | 403 => exit::DENIED,
            400..=499 => exit::REFUSED,
            _ => exit::FAILED,
        };
        let reason = reason.trim();
        let message = if reason.is_empty() {
            format!("{what}: {status}")
        } else {
            format!("{what}: {status}: {reason}")
        };
        CliError { code, message }
    }
}

pub struct StreamClient {
    base: String,
    token: Option<String>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl StreamClient {
    pub fn new(
        target: &str,
        token: Option<String>,
        ca: Option<&std::path::Path>,
    ) -> Result<StreamClient, CliError> {
        let base = target.trim_end_matches('/').to_string();
        let tls = if base.starts_with("https://") {
            (*runnel_tls::client_config(ca).map_err(|e| CliError::failed(e.to_string()))?).clone()
        } else if base.starts_with("http://") {
            runnel_tls::rustls::ClientConfig::builder_with_provider(runnel_tls::provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| CliError::failed(e.to_string()))?
                .with_root_certificates(runnel_tls::rustls::RootCertStore::empty())
                .with_no_client_auth()
        } else {
            return Err(CliError::failed(format!(
                "{target:?}: the target is an http:// or https:// URL"
            )));
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(std::time::Duration::from_secs(5)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(StreamClient {
            base,
            token,
            client: Client::builder(TokioExecutor::new()).build(connector),
        })
    }

    /// The URL of stream `name` (each segment percent-encoded).
    pub fn stream_path(name: &str) -> String {
        let encoded: Vec<String> = name.split('/').map(encode).collect();
        format!("/v1/stream/{}", encoded.join("/"))
    }

    /// Sends a request to `path` (with its query) and answers the response
    /// as it arrives.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Response<Incoming>, CliError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| CliError::failed(format!("request: {e}")))?;
        self.client
            .request(request)
            .await
            .map_err(|e| CliError::failed(format!("{}: {}", self.base, error_chain(&e))))
    }

    /// [`StreamClient::send`], the whole answer read; an error status
    /// becomes a [`CliError`] about `what`.
    pub async fn exchange(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
        what: &str,
    ) -> Result<(StatusCode, HeaderMap, Bytes), CliError> {
        let response = self.send(method, path, headers, body).await?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| CliError::failed(format!("{what}: reading the answer: {e}")))?
            .to_bytes();
        if !parts.status.is_success() && parts.status != StatusCode::NOT_MODIFIED {
            let reason = String::from_utf8_lossy(&body);
            return Err(CliError::of_status(parts.status, what, &reason));
        }
        Ok((parts.status, parts.headers, body))
    }
}

/// A header's text, if present.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v: &HeaderValue| v.to_str().ok())
}

/// Percent-encodes what a path segment or query value may not hold.
pub fn encode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An error with its causes, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
