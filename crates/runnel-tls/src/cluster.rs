//! Mutual TLS between cluster nodes, each node named by its certificate.
//!
//! The cluster CA admits nodes: a certificate it signed for
//! `node-N.runnel` is node N, whether N was a member when this node
//! started or joined since (`runnel serve --join`, `runnel ctl node add`).

use std::path::Path;
use std::sync::Arc;

use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::{pem, provider, ReloadableCert, TlsError};

/// The DNS name a node's certificate carries.
pub fn node_name(id: u64) -> String {
    format!("node-{id}.runnel")
}

/// A peer identified by its certificate, as a connection's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerNode(pub u64);

/// This node's side of the cluster's mutual TLS.
pub struct ClusterTls {
    node_id: u64,
    roots: Arc<RootCertStore>,
    cert: Arc<ReloadableCert>,
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterTls")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl ClusterTls {
    /// `ca`: the cluster CA's certificate(s); `cert`/`key`: this node's,
    /// which must name it.
    pub fn load(node_id: u64, ca: &Path, cert: &Path, key: &Path) -> Result<ClusterTls, TlsError> {
        let mut roots = RootCertStore::empty();
        for ca_cert in pem::certificates(ca)? {
            roots.add(ca_cert).map_err(|e| TlsError::File {
                path: ca.to_path_buf(),
                reason: format!("not a usable CA certificate: {e}"),
            })?;
        }
        let roots = Arc::new(roots);
        let cert = Arc::new(ReloadableCert::load(cert, key)?);
        let leaf = cert.current().cert[0].clone();
        if !names_node(&leaf, node_id) {
            return Err(TlsError::Config(format!(
                "{}: this node's certificate does not name {} (a DNS subject alternative name)",
                cert.cert_path.display(),
                node_name(node_id)
            )));
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), provider())
            .build()
            .map_err(|e| TlsError::Config(format!("cluster CA: {e}")))?;
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(FixedCert(Arc::clone(&cert))));
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(Arc::clone(&roots))
            .with_client_cert_resolver(Arc::new(FixedCert(Arc::clone(&cert))));
        Ok(ClusterTls {
            node_id,
            roots,
            cert,
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
        })
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// This node's certificate (reloaded with [`ClusterTls::reload`]).
    pub fn certificate(&self) -> Arc<ReloadableCert> {
        Arc::clone(&self.cert)
    }

    pub fn reload(&self) -> Result<(), TlsError> {
        self.cert.reload()
    }

    /// A client configuration that presents this node's certificate and
    /// accepts only servers with a certificate from the cluster CA, for
    /// the name the caller dials (`node-{id}.runnel`).
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        Arc::clone(self.connector.config())
    }

    /// Client certificates from the cluster CA checked when presented,
    /// but not required (the HTTP listener also serves clients).
    pub(crate) fn optional_client_verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        WebPkiClientVerifier::builder_with_provider(Arc::clone(&self.roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsError::Config(format!("cluster CA: {e}")))
    }

    /// Opens TLS to node `peer` over `io`: refused unless the server's
    /// certificate comes from the cluster CA and names that node.
    pub async fn connect<IO>(
        &self,
        peer: u64,
        io: IO,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = ServerName::try_from(node_name(peer))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        self.connector.connect(name, io).await
    }

    /// Accepts TLS from a peer over `io`: refused unless the client's
    /// certificate comes from the cluster CA and names a node.
    pub async fn accept<IO>(
        &self,
        io: IO,
    ) -> std::io::Result<(tokio_rustls::server::TlsStream<IO>, PeerNode)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let stream = self.acceptor.accept(io).await?;
        let peer = self.peer_of(stream.get_ref().1).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the peer's certificate names no node (node-ID.runnel)",
            )
        })?;
        Ok((stream, peer))
    }

    /// Which node a verified connection's client certificate names.
    pub fn peer_of(&self, connection: &rustls::ServerConnection) -> Option<PeerNode> {
        let leaf = connection.peer_certificates()?.first()?;
        node_of(leaf).map(PeerNode)
    }
}

/// The node `cert` names: the first `node-ID.runnel` among its DNS names
/// that it verifies for.
fn node_of(cert: &CertificateDer<'_>) -> Option<u64> {
    let parsed = webpki::EndEntityCert::try_from(cert).ok()?;
    let named: Vec<u64> = parsed
        .valid_dns_names()
        .filter_map(|name| name.strip_prefix("node-")?.strip_suffix(".runnel"))
        .filter_map(|id| id.parse().ok())
        .collect();
    named.into_iter().find(|id| names_node(cert, *id))
}

/// Whether `cert` is valid for node `id`'s name.
fn names_node(cert: &CertificateDer<'_>, id: u64) -> bool {
    let Ok(cert) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    ServerName::try_from(node_name(id))
        .is_ok_and(|name| cert.verify_is_valid_for_subject_name(&name).is_ok())
}

/// Always the one (reloadable) certificate, as server or as client.
#[derive(Debug)]
struct FixedCert(Arc<ReloadableCert>);

impl rustls::server::ResolvesServerCert for FixedCert {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.current())
    }
}

impl rustls::client::ResolvesClientCert for FixedCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
