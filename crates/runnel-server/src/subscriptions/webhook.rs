//! The webhook client: a signed POST to a subscription's URL, with a
//! timeout, over connections that never reach a private address. A URL's
//! literal address was checked when the subscription was created
//! (`runnel_core::subscription::config`); names are checked here, when
//! they resolve, so a name that later points inside (DNS rebinding) is
//! not reached.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request};
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use runnel_core::subscription::config::is_public;
use runnel_core::subscription::UrlPolicy;

/// Most bytes of a receiver's answer that are read.
const MAX_ANSWER_BYTES: usize = 64 << 10;

#[derive(Clone)]
pub struct WebhookClient {
    client: Client<HttpsConnector<HttpConnector<PublicResolver>>, Body>,
    /// How long one delivery may take, connection included.
    timeout: Duration,
}

/// What a receiver answered.
#[derive(Debug)]
pub struct Answer {
    pub status: http::StatusCode,
    /// `{"done": true}`: the work of the wake is finished.
    pub done: bool,
}

/// Why a webhook delivery failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook request: {0}")]
    Request(http::Error),
    #[error("webhook POST failed: {0}")]
    Post(hyper_util::client::legacy::Error),
    #[error("webhook did not answer within {0:?}")]
    Timeout(Duration),
}

impl WebhookClient {
    pub fn new(policy: &UrlPolicy, timeout: Duration) -> WebhookClient {
        let resolver = PublicResolver {
            policy: Arc::new(policy.clone()),
        };
        let mut http = HttpConnector::new_with_resolver(resolver);
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        let tls = runnel_tls::client_config(None)
            .map(|config| (*config).clone())
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "https webhooks cannot be verified: no CA roots");
                rustls_without_roots()
            });
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        WebhookClient {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
            timeout,
        }
    }

    /// POSTs `body` to `url` with the signature header.
    pub async fn deliver(
        &self,
        url: &str,
        body: Vec<u8>,
        signature: &str,
    ) -> Result<Answer, WebhookError> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header("webhook-signature", signature)
            .body(Body::from(body))
            .map_err(WebhookError::Request)?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(WebhookError::Post)?;
            let status = response.status();
            let limited = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES);
            let answer = limited
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let done = serde_json::from_slice::<serde_json::Value>(&answer)
                .is_ok_and(|v| v.get("done") == Some(&serde_json::Value::Bool(true)));
            Ok(Answer { status, done })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| WebhookError::Timeout(self.timeout))?
    }
}

fn rustls_without_roots() -> runnel_tls::rustls::ClientConfig {
    runnel_tls::rustls::ClientConfig::builder_with_provider(runnel_tls::provider())
        .with_safe_default_protocol_versions()
        .expect("default protocol versions")
        .with_root_certificates(runnel_tls::rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// Resolves a webhook host and keeps only addresses it may reach: public
/// ones, or any for a host on the allowlist, or loopback for `localhost`
/// when development targets are allowed.
#[derive(Clone)]
struct PublicResolver {
    policy: Arc<UrlPolicy>,
}

impl tower_service::Service<Name> for PublicResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::io::Result<Self::Response>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str().to_ascii_lowercase();
            let allowed = policy
                .allowed_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(&host));
            let loopback_dev = policy.allow_loopback_http && host == "localhost";
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|addr| {
                    allowed || is_public(addr.ip()) || (loopback_dev && addr.ip().is_loopback())
                })
                .collect();
            if found.is_empty() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("{host} resolves to no address a webhook may reach"),
                ));
            }
            Ok(found.into_iter())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_service::Service;

    async fn resolve(policy: UrlPolicy, host: &str) -> std::io::Result<Vec<SocketAddr>> {
        let mut resolver = PublicResolver {
            policy: Arc::new(policy),
        };
        let name: Name = host.parse().unwrap();
        resolver.call(name).await.map(Iterator::collect)
    }

    /// A name is checked when it resolves: `localhost` reaches loopback
    /// only as a development target or an allowed host.
    #[tokio::test]
    async fn names_resolving_to_private_addresses_are_not_reached() {
        let refused = resolve(UrlPolicy::default(), "localhost")
            .await
            .unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
        let dev = UrlPolicy {
            allow_loopback_http: true,
            allowed_hosts: Vec::new(),
        };
        assert!(resolve(dev, "localhost")
            .await
            .unwrap()
            .iter()
            .all(|a| a.ip().is_loopback()));
        let allowed = UrlPolicy {
            allow_loopback_http: false,
            allowed_hosts: vec!["LOCALHOST".into()],
        };
        assert!(!resolve(allowed, "localhost").await.unwrap().is_empty());
    }
}
