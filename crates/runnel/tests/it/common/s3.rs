//! A real S3-compatible server for the tiering tests: moto's server from
//! PyPI, installed by `scripts/install-test-deps.sh` into
//! `target/test-venv` (or named by `RUNNEL_MOTO_SERVER`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Moto {
    child: Child,
    pub endpoint: String,
    client: reqwest::Client,
}

fn moto_server() -> PathBuf {
    if let Some(path) = std::env::var_os("RUNNEL_MOTO_SERVER") {
        return PathBuf::from(path);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join("target/test-venv/bin/moto_server");
    assert!(
        path.exists(),
        "the tiering tests need moto's S3 server: run scripts/install-test-deps.sh \
         (or set RUNNEL_MOTO_SERVER); looked for {}",
        path.display()
    );
    path
}

impl Moto {
    /// Starts a moto server on a free port and waits until it answers.
    pub async fn start() -> Moto {
        let port = super::reserve_ports(1);
        let child = Command::new(moto_server())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while moto.client.get(&moto.endpoint).send().await.is_err() {
            assert!(Instant::now() < deadline, "moto did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        moto
    }

    /// Creates a bucket.
    pub async fn bucket(&self, name: &str) {
        let r = self
            .client
            .put(format!("{}/{name}", self.endpoint))
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "creating bucket {name}: {}",
            r.status()
        );
    }

    /// `runnel serve` flags that tier to `s3://bucket/prefix` here.
    pub fn flags(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let mut flags = vec![
            "--object-store".to_string(),
            format!("s3://{bucket}/{prefix}"),
        ];
        for option in [
            format!("aws_endpoint={}", self.endpoint),
            "aws_allow_http=true".into(),
            "aws_region=us-east-1".into(),
            "aws_access_key_id=test".into(),
            "aws_secret_access_key=test".into(),
            // Requests fail fast while the server is stopped.
            "timeout=2s".into(),
        ] {
            flags.push("--object-store-option".into());
            flags.push(option);
        }
        flags
    }

    /// Keys under `prefix` in `bucket` (ListObjectsV2, every page).
    pub async fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = format!("{}/{bucket}?list-type=2&prefix={prefix}", self.endpoint);
            if let Some(t) = &token {
                url.push_str(&format!("&continuation-token={t}"));
            }
            let body = self
                .client
                .get(url)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            keys.extend(tags(&body, "Key"));
            match tags(&body, "NextContinuationToken").pop() {
                Some(t) if body.contains("<IsTruncated>true</IsTruncated>") => token = Some(t),
                _ => return keys,
            }
        }
    }

    /// Stops the server (SIGSTOP): connections hang, as with a store that
    /// stopped answering.
    pub fn pause(&self) {
        signal(&self.child, libc::SIGSTOP);
    }

    pub fn resume(&self) {
        signal(&self.child, libc::SIGCONT);
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child process we own and have not reaped.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "signalling moto");
}

/// The texts of every `<tag>...</tag>` in `xml`.
fn tags(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    xml.split(&open)
        .skip(1)
        .filter_map(|part| part.split_once(&close).map(|(text, _)| text.to_string()))
        .collect()
}

impl Drop for Moto {
    fn drop(&mut self) {
        signal(&self.child, libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
