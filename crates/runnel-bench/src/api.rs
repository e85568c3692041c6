//! The API styles a workload can speak. The workload is the same for all;
//! only paths, bodies and headers differ.
//!
//! - `runnel` and `durable`: the Durable Streams protocol at `/v1/stream/`.
//! - `ursula`: the same protocol at `/{bucket}/{stream}`, replay through
//!   `GET .../bootstrap`.
//! - `s2`: the S2 REST API (`/v1/basins`, `/v1/streams/{s}/records` with
//!   an `S2-Basin` header, JSON record batches).

use bytes::Bytes;
use http::Method;

use crate::client::{Connection, Reply};
use crate::BenchError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiStyle {
    Runnel,
    Durable,
    /// The Durable Streams protocol with streams at the root (`/NAME`), as
    /// `durable-streams` 0.1.5 serves them.
    DurableRoot,
    Ursula,
    S2,
}

/// Ursula's bucket and S2's basin for benchmark streams.
const NAMESPACE: &str = "runnel-bench";

/// A request to make: method, path, headers, body.
#[derive(Clone)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

impl Call {
    pub async fn send(self, conn: &mut Connection) -> Result<Reply, BenchError> {
        let headers: Vec<(&str, String)> = self.headers.into_iter().collect();
        conn.send(self.method, &self.path, &headers, self.body)
            .await
    }
}

impl ApiStyle {
    fn stream_path(self, name: &str) -> String {
        match self {
            ApiStyle::Runnel | ApiStyle::Durable => format!("/v1/stream/{name}"),
            ApiStyle::DurableRoot => format!("/{name}"),
            ApiStyle::Ursula => format!("/{NAMESPACE}/{name}"),
            ApiStyle::S2 => format!("/v1/streams/{name}/records"),
        }
    }

    fn s2_headers(json: bool) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("s2-basin", NAMESPACE.to_string()),
            ("s2-format", "raw".to_string()),
        ];
        if json {
            h.push(("content-type", "application/json".to_string()));
        }
        h
    }

    /// Whatever must exist before streams can be created: S2's basin,
    /// Ursula's bucket.
    pub async fn prepare(self, conn: &mut Connection) -> Result<(), BenchError> {
        if self == ApiStyle::Ursula {
            let reply = Call {
                method: Method::PUT,
                path: format!("/{NAMESPACE}"),
                headers: vec![],
                body: Bytes::new(),
            }
            .send(conn)
            .await?;
            if !reply.status.is_success() && reply.status != http::StatusCode::CONFLICT {
                return Err(BenchError::Setup(format!(
                    "creating the Ursula bucket: {}",
                    reply.status
                )));
            }
        }
        if self == ApiStyle::S2 {
            let body = serde_json::json!({ "basin": NAMESPACE }).to_string();
            let reply = Call {
                method: Method::POST,
                path: "/v1/basins".into(),
                headers: vec![("content-type", "application/json".into())],
                body: body.into(),
            }
            .send(conn)
            .await?;
            if !reply.status.is_success() && reply.status != http::StatusCode::CONFLICT {
                return Err(BenchError::Setup(format!(
                    "creating the S2 basin: {}",
                    reply.status
                )));
            }
        }
        Ok(())
    }

    /// Creates one stream (idempotently).
    pub async fn create_stream(
        self,
        conn: &mut Connection,
        name: &str,
        content_type: &str,
    ) -> Result<(), BenchError> {
        self.create_stream_with(conn, name, content_type, &[]).await
    }

    /// Creates one stream with extra creation headers (ignored by S2).
    pub async fn create_stream_with(
        self,
        conn: &mut Connection,
        name: &str,
        content_type: &str,
        extra: &[(&'static str, String)],
    ) -> Result<(), BenchError> {
        let call = match self {
            ApiStyle::S2 => Call {
                method: Method::POST,
                path: "/v1/streams".into(),
                headers: Self::s2_headers(true),
                body: serde_json::json!({ "stream": name }).to_string().into(),
            },
            _ => Call {
                method: Method::PUT,
                path: self.stream_path(name),
                headers: [("content-type", content_type.to_string())]
                    .into_iter()
                    .chain(extra.iter().cloned())
                    .collect(),
                body: Bytes::new(),
            },
        };
        // A cluster that just formed may still move a leader: 503 means
        // "retry shortly", so setup does, for up to 5 s.
        let mut attempts = 0;
        loop {
            let reply = call.clone().send(conn).await?;
            if reply.status.is_success() || reply.status == http::StatusCode::CONFLICT {
                return Ok(());
            }
            attempts += 1;
            if reply.status != http::StatusCode::SERVICE_UNAVAILABLE || attempts == 50 {
                return Err(BenchError::Setup(format!(
                    "creating stream {name}: {}",
                    reply.status
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// One append of `payload` (text) to `name`.
    pub fn append(self, name: &str, content_type: &str, payload: Bytes) -> Call {
        match self {
            ApiStyle::S2 => {
                let text = String::from_utf8_lossy(&payload);
                Call {
                    method: Method::POST,
                    path: self.stream_path(name),
                    headers: Self::s2_headers(true),
                    body: serde_json::json!({ "records": [{ "body": text }] })
                        .to_string()
                        .into(),
                }
            }
            _ => Call {
                method: Method::POST,
                path: self.stream_path(name),
                headers: vec![("content-type", content_type.to_string())],
                body: payload,
            },
        }
    }

    /// A catch-up read from `offset` (`None`: from the start).
    pub fn read(self, name: &str, offset: Option<&str>) -> Call {
        let path = match (self, offset) {
            (ApiStyle::S2, _) => format!(
                "{}?seq_num={}",
                self.stream_path(name),
                offset.unwrap_or("0")
            ),
            (_, Some(o)) => format!("{}?offset={o}", self.stream_path(name)),
            (_, None) => format!("{}?offset=-1", self.stream_path(name)),
        };
        Call {
            method: Method::GET,
            path,
            headers: if self == ApiStyle::S2 {
                Self::s2_headers(false)
            } else {
                vec![]
            },
            body: Bytes::new(),
        }
    }

    /// The one-request replay (snapshot plus tail) of servers that have
    /// one: Runnel's `$bootstrap`, Ursula's `/bootstrap`.
    pub fn bootstrap(self, name: &str) -> Option<Call> {
        let path = match self {
            ApiStyle::Runnel => format!("{}/$bootstrap", self.stream_path(name)),
            ApiStyle::Ursula => format!("{}/bootstrap", self.stream_path(name)),
            ApiStyle::Durable | ApiStyle::DurableRoot | ApiStyle::S2 => return None,
        };
        Some(Call {
            method: Method::GET,
            path,
            headers: vec![],
            body: Bytes::new(),
        })
    }

    /// The SSE live-tail path from the current tail.
    pub fn sse_path(self, name: &str) -> Result<String, BenchError> {
        match self {
            ApiStyle::S2 => Err(BenchError::Usage(
                "fan-out speaks Durable Streams SSE; the s2 style has no equivalent here".into(),
            )),
            _ => Ok(format!("{}?offset=now&live=sse", self.stream_path(name))),
        }
    }

    /// Where a catch-up read continues, and whether it reached the tail.
    pub fn continuation(self, reply: &Reply, records_so_far: u64) -> (Option<String>, bool) {
        match self {
            ApiStyle::S2 => {
                let value: serde_json::Value =
                    serde_json::from_slice(&reply.body).unwrap_or_default();
                let got = value["records"].as_array().map_or(0, |r| r.len() as u64);
                (Some((records_so_far + got).to_string()), got == 0)
            }
            _ => {
                let next = reply
                    .headers
                    .get("stream-next-offset")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                (next, reply.headers.contains_key("stream-up-to-date"))
            }
        }
    }
}
