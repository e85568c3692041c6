//! A minimal HTTP/1.1 client: one TCP connection per simulated client, no
//! pool, no redirects. Load generators need exactly this, and nothing in
//! the request path that a server under test would not see from `wrk`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::BenchError;

/// A target server: its socket address, the `Host` header to send, the
/// bearer token to send, if any, and for `https://` targets the TLS
/// client (see [`Target::trust`]).
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub authority: String,
    pub token: Option<String>,
    /// `https://` targets: the server's name and the client configuration.
    pub tls: Option<(String, Option<Arc<rustls::ClientConfig>>)>,
}

impl Target {
    /// Parses `http://host:port` or `https://host:port` (a trailing `/`
    /// is allowed).
    pub fn parse(url: &str) -> Result<Target, BenchError> {
        let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => {
                return Err(BenchError::Usage(format!(
                    "target {url:?} must start with http:// or https://"
                )))
            }
        };
        let authority = rest.trim_end_matches('/').to_string();
        use std::net::ToSocketAddrs;
        let addr = authority
            .to_socket_addrs()
            .map_err(|e| BenchError::Usage(format!("target {url:?}: {e}")))?
            .next()
            .ok_or_else(|| BenchError::Usage(format!("target {url:?} resolves to nothing")))?;
        let host = authority
            .rsplit_once(':')
            .map_or(authority.as_str(), |(host, _)| host)
            .trim_matches(['[', ']'])
            .to_string();
        Ok(Target {
            addr,
            authority,
            token: None,
            tls: tls.then_some((host, None)),
        })
    }

    /// For an `https://` target: trust the CA certificates in the PEM
    /// file `ca` (a benchmark server's test CA).
    pub fn trust(&mut self, ca: &std::path::Path) -> Result<(), BenchError> {
        use rustls::pki_types::pem::PemObject;
        let Some((_, config)) = &mut self.tls else {
            return Ok(());
        };
        let bad =
            |e: &dyn std::fmt::Display| BenchError::Usage(format!("--ca {}: {e}", ca.display()));
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).map_err(|e| bad(&e))? {
            roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(&e))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        *config = Some(Arc::new(client));
        Ok(())
    }

    /// Parses a comma-separated list.
    pub fn parse_list(urls: &str) -> Result<Vec<Target>, BenchError> {
        urls.split(',')
            .filter(|u| !u.is_empty())
            .map(Target::parse)
            .collect()
    }
}

/// HTTP/1.1 over `io`, its connection driven by a task of its own.
async fn handshake<I>(io: I) -> Result<SendRequest<Full<Bytes>>, BenchError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| BenchError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// One keep-alive connection.
pub struct Connection {
    target: Target,
    sender: SendRequest<Full<Bytes>>,
}

/// A finished exchange with the body read.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Connection {
    pub async fn open(target: &Target) -> Result<Connection, BenchError> {
        let stream = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::TcpStream::connect(target.addr),
        )
        .await
        .map_err(|_| BenchError::Http("connect timed out".into()))?
        .map_err(|e| BenchError::Http(format!("connect {}: {e}", target.addr)))?;
        stream.set_nodelay(true).ok();
        let sender = match &target.tls {
            None => handshake(stream).await?,
            Some((host, config)) => {
                let config = config.clone().ok_or_else(|| {
                    BenchError::Usage("an https:// target needs --ca (its CA's PEM file)".into())
                })?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| BenchError::Usage(format!("{host}: {e}")))?;
                let stream = tokio_rustls::TlsConnector::from(config)
                    .connect(name, stream)
                    .await
                    .map_err(|e| BenchError::Http(format!("TLS with {}: {e}", target.addr)))?;
                handshake(stream).await?
            }
        };
        Ok(Connection {
            target: target.clone(),
            sender,
        })
    }

    /// Sends a request and returns the response head with the body unread.
    pub async fn send_streaming(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<http::Response<Incoming>, BenchError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, &self.target.authority);
        if let Some(token) = &self.target.token {
            builder = builder.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        for (name, value) in headers {
            builder = builder.header(*name, value);
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|e| BenchError::Http(e.to_string()))?;
        self.sender
            .ready()
            .await
            .map_err(|e| BenchError::Http(e.to_string()))?;
        self.sender
            .send_request(request)
            .await
            .map_err(|e| BenchError::Http(e.to_string()))
    }

    /// Sends a request and reads the whole response.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Reply, BenchError> {
        let response = self.send_streaming(method, path, headers, body).await?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| BenchError::Http(e.to_string()))?
            .to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// Outcome class of a write, as the results count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// 429 or 503: the server pushed back.
    BackPressure,
    Error,
}

pub fn classify(status: StatusCode) -> Outcome {
    if status.is_success() {
        Outcome::Ok
    } else if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
        Outcome::BackPressure
    } else {
        Outcome::Error
    }
}
