//! Forwarding to a group's leader. In a cluster any node accepts any
//! request; one for a stream whose group another node leads is relayed to
//! that node over a pooled HTTP/1.1 connection and its answer (SSE and
//! long-poll included) streamed back as it comes.
//!
//! A forwarded request carries `Runnel-Forwarded-By`; a node receiving one
//! for a group it does not lead answers 503 + Retry-After instead of
//! forwarding again, so leadership changes never make a request loop.
//!
//! With the cluster's mutual TLS, requests go over HTTPS to
//! `node-{id}.runnel:{port}`: the name resolves to the leader's address
//! ([`PeerResolver`]), rustls checks that the leader's certificate names
//! that node, and this node presents its own certificate.

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::{HeaderName, HOST};
use http::{HeaderValue, Uri};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use runnel_tls::rustls;

use crate::error::ApiError;
use crate::handlers::leader_retry::Retry;

/// Marks a request another node forwarded (its value: that node's id).
pub const FORWARDED_BY: HeaderName = HeaderName::from_static("runnel-forwarded-by");

/// The HTTP client that relays requests to leaders.
#[derive(Clone)]
pub struct Forwarder {
    client: ForwardClient,
}

#[derive(Clone)]
enum ForwardClient {
    Plain(Client<HttpConnector, Body>),
    Tls {
        client: Client<HttpsConnector<HttpConnector<PeerResolver>>, Body>,
        resolver: PeerResolver,
    },
}

impl Default for Forwarder {
    fn default() -> Self {
        Forwarder {
            client: ForwardClient::Plain(pooled(plain_connector(HttpConnector::new()))),
        }
    }
}

fn plain_connector<R: Clone>(mut connector: HttpConnector<R>) -> HttpConnector<R> {
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(1)));
    connector
}

fn pooled<C>(connector: C) -> Client<C, Body>
where
    C: hyper_util::client::legacy::connect::Connect + Clone,
{
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(std::time::Duration::from_secs(30))
        .build(connector)
}

impl Forwarder {
    /// Forwards over mutual TLS with `config` (see the module docs).
    pub fn with_tls(config: Arc<rustls::ClientConfig>) -> Forwarder {
        let resolver = PeerResolver::default();
        let mut http = plain_connector(HttpConnector::new_with_resolver(resolver.clone()));
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*config).clone())
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        Forwarder {
            client: ForwardClient::Tls {
                client: pooled(https),
                resolver,
            },
        }
    }
}

/// Resolves `node-{id}.runnel` to the address a node listens on (learnt
/// from the routes requests are forwarded by).
#[derive(Clone, Default)]
pub struct PeerResolver(Arc<Mutex<HashMap<String, String>>>);

impl tower_service::Service<Name> for PeerResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Self::Response>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let addr = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name.as_str())
            .cloned();
        Box::pin(async move {
            let addr = addr.ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::NotFound, "not a known cluster node")
            })?;
            Ok(tokio::net::lookup_host(addr)
                .await?
                .collect::<Vec<_>>()
                .into_iter())
        })
    }
}

impl Forwarder {
    /// Relays `request` to the node at `addr` (`HOST:PORT`), as `me`,
    /// with the cluster key when access control is on. The caller's own
    /// credentials go along unchanged: the leader checks them again.
    pub async fn forward(
        &self,
        me: &str,
        leader: u64,
        addr: &str,
        cluster_key: Option<HeaderValue>,
        request: Request,
    ) -> Response {
        if request.headers().contains_key(&FORWARDED_BY) {
            return Retry::Safe.mark(
                ApiError::Unavailable(format!(
                    "request forwarded here, but node {leader} now leads the stream's group; retry"
                ))
                .into_response(),
            );
        }
        let (mut parts, body) = request.into_parts();
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let target = match &self.client {
            ForwardClient::Plain(_) => format!("http://{addr}{path}"),
            ForwardClient::Tls { resolver, .. } => {
                let name = runnel_tls::node_name(leader);
                let port = addr.rsplit_once(':').map_or("443", |(_, port)| port);
                let target = format!("https://{name}:{port}{path}");
                resolver
                    .0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name, addr.to_string());
                target
            }
        };
        let uri = match target.parse::<Uri>() {
            Ok(uri) => uri,
            Err(e) => {
                return ApiError::Unavailable(format!("leader address {addr:?}: {e}"))
                    .into_response()
            }
        };
        parts.uri = uri;
        // Whatever the client spoke (HTTP/2 over TLS), the hop to the
        // leader is HTTP/1.1 on a pooled connection.
        parts.version = http::Version::HTTP_11;
        if let Ok(host) = HeaderValue::from_str(addr) {
            parts.headers.insert(HOST, host);
        }
        if let Ok(me) = HeaderValue::from_str(me) {
            parts.headers.insert(FORWARDED_BY, me);
        }
        if let Some(key) = cluster_key {
            parts.headers.insert(crate::auth::CLUSTER_KEY, key);
        }
        let request = Request::from_parts(parts, body);
        let answered = match &self.client {
            ForwardClient::Plain(client) => client.request(request).await,
            ForwardClient::Tls { client, .. } => client.request(request).await,
        };
        match answered {
            Ok(mut response) => {
                // This node adds its own, once.
                crate::routes::remove_protocol_headers(response.headers_mut());
                response.map(Body::new)
            }
            Err(e) => {
                tracing::warn!(leader, addr, error = %e, "forwarding to the leader failed");
                // Not connected: the leader never saw the request.
                let retry = if e.is_connect() {
                    Retry::Safe
                } else {
                    Retry::IfIdempotent
                };
                retry.mark(
                    ApiError::Unavailable(format!(
                        "the leader of this stream's group (node {leader}) is unreachable; retry"
                    ))
                    .into_response(),
                )
            }
        }
    }
}
