//! Starts the real `runnel` binary for end-to-end tests.

pub mod cluster;
pub mod membership;
pub mod readers;
pub mod s3;
pub mod webhooks;
pub mod writers;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The server binary to run with `env`: the one `RUNNEL_TEST_BINARY`
/// names (an older build, for upgrade tests), `runnel` itself, or, when `env`
/// arms a fault hook (`RUNNEL_FAILPOINT`, `RUNNEL_UNSAFE_STALE_READS`), the
/// test-only `runnel-faulty` (crates/runnel-faulty), the same server with
/// its hooks armed: the shipped binary cannot arm them. `cargo test
/// --workspace` builds it beside `runnel`.
pub fn server_binary<K: AsRef<str>, V: AsRef<str>>(env: &[(K, V)]) -> std::path::PathBuf {
    if let Some((_, path)) = env.iter().find(|(k, _)| k.as_ref() == "RUNNEL_TEST_BINARY") {
        return std::path::PathBuf::from(path.as_ref());
    }
    let runnel = std::path::PathBuf::from(env!("CARGO_BIN_EXE_runnel"));
    let armed = env.iter().any(|(k, _)| {
        matches!(
            k.as_ref(),
            "RUNNEL_FAILPOINT" | "RUNNEL_UNSAFE_STALE_READS" | "RUNNEL_ANNOUNCE_CLUSTER_VERSION"
        )
    });
    if !armed {
        return runnel;
    }
    let faulty = runnel.with_file_name("runnel-faulty");
    assert!(
        faulty.exists(),
        "{} is missing: test the workspace (cargo test --workspace) or build it \
         (cargo build -p runnel-faulty)",
        faulty.display()
    );
    faulty
}

/// Where loopback ports for test servers are handed out: below the kernel's
/// ephemeral range (32768 and up here), so that no client socket's source
/// port can take a port before its server binds it.
const PORT_RANGE: std::ops::Range<u32> = 20_000..32_000;

/// `count` consecutive loopback ports that are free now and that no other
/// caller in this process has been given.
///
/// Tests run in parallel threads, and a port that is merely free when it is
/// checked can be picked again by another test before the first test's
/// server binds it (one CI run lost a cluster to exactly that). A counter
/// shared by the whole process, started at a random point so that test
/// binaries run one after another do not reuse each other's ports at once,
/// hands every port out once.
pub fn reserve_ports(count: u32) -> u16 {
    use rand::Rng;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = PORT_RANGE.end - PORT_RANGE.start;
    let _ = NEXT.compare_exchange(
        0,
        rand::thread_rng().gen_range(0..span),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(count, Ordering::Relaxed) % span;
        let first = PORT_RANGE.start + offset;
        if first + count > PORT_RANGE.end {
            continue;
        }
        let all_free =
            (first..first + count).all(|p| TcpListener::bind(("127.0.0.1", p as u16)).is_ok());
        if all_free {
            return first as u16;
        }
    }
    panic!("no {count} free consecutive loopback ports in {PORT_RANGE:?}");
}

pub struct Server {
    child: Child,
    pub base: String,
}

impl Server {
    /// Starts `runnel serve` on a free loopback port over `data_dir` and
    /// waits until it answers /health.
    pub async fn start(data_dir: &Path, extra: &[&str]) -> Server {
        Server::start_with(data_dir, extra, &[]).await
    }

    /// [`Server::start`] with more environment variables.
    pub async fn start_with<S: AsRef<std::ffi::OsStr>>(
        data_dir: &Path,
        extra: &[S],
        env: &[(&str, &str)],
    ) -> Server {
        Server::start_logging(data_dir, extra, env, None).await
    }

    /// [`Server::start_with`], its log (stderr) going to `log` if given.
    pub async fn start_logging<S: AsRef<std::ffi::OsStr>>(
        data_dir: &Path,
        extra: &[S],
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> Server {
        Server::launch_fresh(data_dir, extra, env, log, None).await
    }

    /// [`Server::start`] for a server with `--tls-cert` in `extra` whose
    /// certificate comes from the CA in the PEM file `ca`.
    pub async fn start_tls<S: AsRef<std::ffi::OsStr>>(
        data_dir: &Path,
        extra: &[S],
        ca: &Path,
    ) -> Server {
        Server::launch_fresh(data_dir, extra, &[], None, Some(ca)).await
    }

    /// Starts the server again on its port over `data_dir` (after a kill).
    pub async fn restart<S: AsRef<std::ffi::OsStr>>(&mut self, data_dir: &Path, extra: &[S]) {
        let port: u16 = self.base.rsplit(':').next().unwrap().parse().unwrap();
        *self = Server::launch_on(port, data_dir, extra, &[], None, None)
            .await
            .expect("the restarted server exited before it answered /health");
    }

    /// [`Server::launch_on`] a newly reserved port, again on another port
    /// if the server exits at once: this machine is shared, and a process
    /// outside this test binary can take a port between its reservation
    /// and the server's bind (one CI run lost a test to exactly that).
    async fn launch_fresh<S: AsRef<std::ffi::OsStr>>(
        data_dir: &Path,
        extra: &[S],
        env: &[(&str, &str)],
        log: Option<&Path>,
        ca: Option<&Path>,
    ) -> Server {
        for _ in 0..5 {
            let port = reserve_ports(1);
            if let Some(server) = Server::launch_on(port, data_dir, extra, env, log, ca).await {
                return server;
            }
        }
        panic!("the server exited before it answered /health, on five ports in a row");
    }

    async fn launch_on<S: AsRef<std::ffi::OsStr>>(
        port: u16,
        data_dir: &Path,
        extra: &[S],
        env: &[(&str, &str)],
        log: Option<&Path>,
        ca: Option<&Path>,
    ) -> Option<Server> {
        let stderr = match log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
            None => Stdio::inherit(),
        };
        let child = Command::new(server_binary(env))
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("RUNNEL_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("runnel binary starts");
        let (scheme, client) = match ca {
            None => ("http", reqwest::Client::new()),
            Some(ca) => ("https", https_client(ca, false)),
        };
        let mut server = Server {
            child,
            base: format!("{scheme}://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = client.get(format!("{}/health", server.base)).send().await {
                if r.status().is_success() {
                    return Some(server);
                }
            }
            if server.child.try_wait().expect("try_wait").is_some() {
                return None;
            }
            assert!(Instant::now() < deadline, "server did not become healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Resident memory of the server process, in bytes.
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status");
        kb * 1024
    }

    pub fn stream_url(&self, name: &str) -> String {
        format!("{}/v1/stream/{name}", self.base)
    }

    /// `HOST:PORT`, for tests that speak HTTP over a raw socket.
    pub fn addr(&self) -> String {
        self.base.trim_start_matches("http://").to_string()
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("reap");
    }

    /// Sends SIGTERM: the server shuts down gracefully.
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Sends `signal` to the server process.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) with a child's pid and a valid signal.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "signal {signal} sent");
    }

    /// The exit status, once the process has ended.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Whether the process ended by itself within `timeout`.
    pub async fn exits_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.child.try_wait().expect("try_wait").is_some() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// `/_runnel/status`.
    pub async fn status(&self) -> serde_json::Value {
        let r = reqwest::get(format!("{}/_runnel/status", self.base))
            .await
            .expect("status answers");
        serde_json::from_slice(&r.bytes().await.unwrap()).expect("status is JSON")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Creates a `text/plain` stream at `url` holding `initial`; fails the test
/// unless the server answers 201.
pub async fn create_text(client: &reqwest::Client, url: &str, initial: &str) {
    let r = client
        .put(url)
        .header("content-type", "text/plain")
        .body(initial.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "creating {url}");
}

/// Appends `body` to the `text/plain` stream at `url`; fails the test
/// unless the server answers 204.
pub async fn append_text(client: &reqwest::Client, url: &str, body: &str) {
    let r = client
        .post(url)
        .header("content-type", "text/plain")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "appending to {url}");
}

/// Appends `message` to the `text/plain` stream at `url` as idempotent
/// producer `writer-{writer}` (epoch 0, sequence `seq`); an error answer
/// or a failed request comes back as one line.
pub async fn idempotent_append(
    client: &reqwest::Client,
    url: &str,
    writer: usize,
    seq: u64,
    message: &str,
) -> Result<(), String> {
    let answer = client
        .post(url)
        .header("content-type", "text/plain")
        .header("producer-id", format!("writer-{writer}"))
        .header("producer-epoch", "0")
        .header("producer-seq", seq.to_string())
        .body(message.to_string())
        .send()
        .await
        .map_err(|e| {
            // With its causes: "error sending request" alone says little.
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                reason.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            reason
        })?;
    if answer.status().is_success() {
        return Ok(());
    }
    let status = answer.status();
    let reason = answer.text().await.unwrap_or_default();
    Err(format!("{status} {}", reason.trim()))
}

/// The body of a plain GET of `url` (a test failure if it cannot be sent).
pub async fn get_text(client: &reqwest::Client, url: &str) -> String {
    client.get(url).send().await.unwrap().text().await.unwrap()
}

/// Reads a whole stream by following Stream-Next-Offset.
pub async fn read_all(client: &reqwest::Client, url: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    loop {
        let r = client
            .get(format!("{url}?offset={offset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "reading {url}");
        let next = r.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        let done = r.headers().get("stream-up-to-date").is_some();
        out.extend_from_slice(&r.bytes().await.unwrap());
        if done {
            return out;
        }
        offset = next;
    }
}

/// Throwaway certificates from `scripts/test-ca.sh` (a CA, a localhost
/// server certificate, `nodes` node certificates, rogue ones).
pub fn test_ca(nodes: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-ca.sh");
    let made = Command::new("bash")
        .arg(script)
        .arg(dir.path())
        .arg(nodes.to_string())
        .status()
        .unwrap();
    assert!(made.success(), "scripts/test-ca.sh ran");
    dir
}

/// An HTTPS client trusting the CA in the PEM file `ca` (HTTP/2 through
/// ALPN unless `http1_only`).
pub fn https_client(ca: &Path, http1_only: bool) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    let builder = reqwest::Client::builder().add_root_certificate(ca);
    let builder = if http1_only {
        builder.http1_only()
    } else {
        builder
    };
    builder.build().unwrap()
}

/// A rustls client trusting the CA in the PEM file `ca`, offering `alpn`.
pub fn tls_connector(ca: &Path, alpn: &[&[u8]]) -> runnel_tls::tokio_rustls::TlsConnector {
    use runnel_tls::rustls;
    use runnel_tls::rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(runnel_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    runnel_tls::tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
}
