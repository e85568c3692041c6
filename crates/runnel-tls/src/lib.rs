//! TLS for Runnel, with rustls (the `ring` provider): what the HTTP
//! listener, the forwarder and the Raft transport need, without knowing
//! HTTP or Raft themselves.
//!
//! - [`ReloadableCert`]: a certificate chain and key read from PEM files
//!   and swapped in place when reloaded (SIGHUP): handshakes from then on
//!   present the new pair; open connections keep the one they began with;
//!   a bad new pair is refused and the old one stays.
//! - [`ClusterTls`]: mutual TLS between cluster nodes. Every node holds a
//!   certificate from the cluster's own CA naming it `node-{id}.runnel`
//!   (a DNS subject alternative name). A node dialing node N accepts only
//!   N's certificate; a node accepting a connection requires a certificate
//!   from the CA and learns which node it is.
//! - [`http_server_config`]: the HTTP listener's configuration: ALPN for
//!   HTTP/2 and HTTP/1.1, the public certificate, and in a cluster with
//!   mutual TLS the node's own certificate for peers that ask for it by
//!   name (SNI), with client certificates from the CA optional (clients
//!   have none; peers forwarding requests present theirs).

mod cluster;
mod pem;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

pub use cluster::{node_name, ClusterTls, PeerNode};
pub use rustls;
pub use tokio_rustls;

/// The one error type of this crate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Rustls(#[from] rustls::Error),
}

/// The cryptography all of Runnel's TLS uses.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain and private key from PEM files, reloadable.
pub struct ReloadableCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for ReloadableCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadableCert")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl ReloadableCert {
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<ReloadableCert, TlsError> {
        let current = read_pair(cert_path, key_path)?;
        Ok(ReloadableCert {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: RwLock::new(Arc::new(current)),
        })
    }

    /// Reads the files again. On any error (unreadable, not PEM, a key
    /// that does not match the certificate) the pair in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = read_pair(&self.cert_path, &self.key_path)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        Ok(())
    }

    /// The pair in use now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }
}

fn read_pair(cert_path: &Path, key_path: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = pem::certificates(cert_path)?;
    let key = pem::private_key(key_path)?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::File {
            path: key_path.to_path_buf(),
            reason: format!("unusable private key: {e}"),
        })?;
    let pair = CertifiedKey::new(chain, signing);
    pair.keys_match().map_err(|e| TlsError::File {
        path: key_path.to_path_buf(),
        reason: format!("the key does not belong to {}: {e}", cert_path.display()),
    })?;
    Ok(pair)
}

/// Chooses the certificate of the HTTP listener: the node's cluster
/// certificate for a peer that names it, the public one for everyone
/// else (the cluster one if there is no public one).
#[derive(Debug)]
struct ListenerCerts {
    public: Option<Arc<ReloadableCert>>,
    node: Option<(String, Arc<ReloadableCert>)>,
}

impl ResolvesServerCert for ListenerCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some((name, cert)) = &self.node {
            if hello.server_name() == Some(name.as_str()) || self.public.is_none() {
                return Some(cert.current());
            }
        }
        self.public.as_ref().map(|cert| cert.current())
    }
}

/// A client configuration for talking to a Runnel server over HTTPS:
/// trusting the CA certificates in the PEM file `ca`, or the system's
/// roots without one.
pub fn client_config(ca: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in pem::certificates(path)? {
                roots.add(cert).map_err(|e| TlsError::File {
                    path: path.to_path_buf(),
                    reason: format!("not a usable CA certificate: {e}"),
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError::Config(
                    "no system CA certificates found; name one with --ca".into(),
                ));
            }
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The HTTP listener's TLS configuration (see the crate docs). `public`
/// or `cluster` must be given.
pub fn http_server_config(
    public: Option<Arc<ReloadableCert>>,
    cluster: Option<&ClusterTls>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    if public.is_none() && cluster.is_none() {
        return Err(TlsError::Config(
            "TLS needs a certificate: --tls-cert/--tls-key or the cluster's".into(),
        ));
    }
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let builder = match cluster {
        Some(cluster) => builder.with_client_cert_verifier(cluster.optional_client_verifier()?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(ListenerCerts {
        public,
        node: cluster.map(|c| (node_name(c.node_id()), c.certificate())),
    }));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests;
