//! Certificates from `scripts/test-ca.sh` (openssl): reloads, and mutual
//! TLS between nodes over in-memory pipes.

use std::path::{Path, PathBuf};

use super::*;

fn test_ca() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-ca.sh");
    let made = std::process::Command::new("bash")
        .arg(script)
        .arg(dir.path())
        .arg("3")
        .status()
        .unwrap();
    assert!(made.success(), "scripts/test-ca.sh ran");
    dir
}

fn pem(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    )
}

fn leaf(pair: &CertifiedKey) -> Vec<u8> {
    pair.cert[0].to_vec()
}

#[test]
fn a_reload_swaps_the_pair_and_a_bad_one_keeps_the_old() {
    let ca = test_ca();
    let dir = ca.path();
    let (cert, key) = pem(dir, "server");
    let live = dir.join("live.pem");
    let live_key = dir.join("live.key");
    std::fs::copy(&cert, &live).unwrap();
    std::fs::copy(&key, &live_key).unwrap();
    let reloadable = ReloadableCert::load(&live, &live_key).unwrap();
    let first = leaf(&reloadable.current());

    let (other, other_key) = pem(dir, "other-server");
    std::fs::copy(&other, &live).unwrap();
    std::fs::copy(&other_key, &live_key).unwrap();
    reloadable.reload().unwrap();
    let second = leaf(&reloadable.current());
    assert_ne!(first, second);

    // Not PEM; a key that belongs to another certificate: refused.
    std::fs::write(&live, "not a certificate").unwrap();
    assert!(reloadable.reload().is_err());
    std::fs::copy(&cert, &live).unwrap();
    let err = reloadable.reload().unwrap_err().to_string();
    assert!(err.contains("does not belong"), "{err}");
    assert_eq!(leaf(&reloadable.current()), second);
}

fn node(dir: &Path, id: u64, cert: &str) -> ClusterTls {
    let (cert, key) = pem(dir, cert);
    ClusterTls::load(id, &dir.join("ca.pem"), &cert, &key).unwrap()
}

/// Node `client` dials `dialed` over a pipe whose far end `server` accepts.
async fn handshake(
    client: &ClusterTls,
    dialed: u64,
    server: &ClusterTls,
) -> (std::io::Result<()>, std::io::Result<PeerNode>) {
    let (a, b) = tokio::io::duplex(64 << 10);
    let (dialing, accepting) = tokio::join!(client.connect(dialed, a), server.accept(b));
    (dialing.map(drop), accepting.map(|(_, peer)| peer))
}

#[tokio::test]
async fn nodes_know_each_other_by_certificate() {
    let ca = test_ca();
    let dir = ca.path();
    let (one, two) = (node(dir, 1, "node-1"), node(dir, 2, "node-2"));
    let (dialing, accepting) = handshake(&one, 2, &two).await;
    dialing.unwrap();
    assert_eq!(accepting.unwrap(), PeerNode(1));

    // Any node the cluster CA certified is known by its certificate,
    // with no member list to keep up to date.
    let three = node(dir, 3, "node-3");
    let (dialing, accepting) = handshake(&three, 1, &one).await;
    dialing.unwrap();
    assert_eq!(accepting.unwrap(), PeerNode(3));

    // Dialing node 3 but reaching node 2: the client refuses.
    let (dialing, _) = handshake(&one, 3, &two).await;
    assert!(dialing.is_err());

    // A certificate naming node 1 from another CA: node 2 refuses it.
    let rogue = {
        let (cert, key) = pem(dir, "rogue-node-1");
        ClusterTls::load(1, &dir.join("rogue-ca.pem"), &cert, &key).unwrap()
    };
    let (_, accepting) = handshake(&rogue, 2, &two).await;
    assert!(accepting.is_err());
}

#[test]
fn a_node_certificate_must_name_the_node() {
    let ca = test_ca();
    let dir = ca.path();
    let (cert, key) = pem(dir, "node-2");
    let err = ClusterTls::load(1, &dir.join("ca.pem"), &cert, &key)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("node-1.runnel"), "{err}");
}
