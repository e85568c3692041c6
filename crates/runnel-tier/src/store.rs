//! The object store client: which store a URL names, with what options,
//! and the handful of calls Runnel makes (create-only puts, ranged gets,
//! deletes, listings), each bounded by a timeout.
//!
//! URLs: `file:///path` (local disk; files and their directories are
//! fsynced before a put returns), `s3://bucket/prefix` (AWS S3 and
//! S3-compatible servers; endpoint, region and credentials from the
//! standard `AWS_*` environment variables and the options, e.g.
//! `aws_endpoint`, `aws_allow_http`, `aws_virtual_hosted_style_request`),
//! `gs://bucket/prefix`, `az://container/prefix`, and `memory:///` (tests).
//! The cloud clients retry failed requests with jittered exponential
//! backoff a bounded number of times; every call also has an overall
//! timeout here.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutMultipartOptions, PutOptions, PutPayload, RetryConfig,
};

use crate::TierError;

/// Which store, and how to talk to it.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// `file:///path`, `s3://bucket/prefix`, `gs://...`, `az://...`,
    /// `memory:///`.
    pub url: String,
    /// Builder options for the store (`aws_endpoint`, `aws_region`,
    /// `aws_allow_http`, `timeout`, ...); they win over the environment.
    pub options: Vec<(String, String)>,
    /// Overall limit of one call, retries included.
    pub call_timeout: Duration,
    /// Retries of one request by the cloud clients (jittered backoff).
    pub max_retries: usize,
    /// Objects larger than this are uploaded in parts of this size.
    pub multipart_part_bytes: u64,
    /// Benchmarks: wait this long before every read, as a distant store's
    /// first byte would (object_store's throttled store).
    pub read_latency: Option<Duration>,
}

impl StoreConfig {
    /// The directory a `file://` URL names.
    pub fn local_dir(&self) -> Option<std::path::PathBuf> {
        url::Url::parse(&self.url)
            .ok()
            .filter(|u| u.scheme() == "file")
            .and_then(|u| u.to_file_path().ok())
    }

    pub fn new(url: impl Into<String>) -> StoreConfig {
        StoreConfig {
            url: url.into(),
            options: Vec::new(),
            call_timeout: Duration::from_secs(30),
            max_retries: 3,
            multipart_part_bytes: 16 << 20,
            read_latency: None,
        }
    }
}

/// Calls made and their outcomes, for status and metrics.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub gets: AtomicU64,
    pub get_bytes: AtomicU64,
    pub deletes: AtomicU64,
    pub errors: AtomicU64,
    /// Time spent in calls, in microseconds.
    pub call_micros: AtomicU64,
}

/// An object as a listing shows it (path relative to the store's prefix).
#[derive(Debug, Clone)]
pub struct Listed {
    pub path: Path,
    pub size: u64,
    pub modified_ms: i64,
}

/// The object store below a prefix, with Runnel's calls.
pub struct TierStore {
    inner: Arc<dyn ObjectStore>,
    prefix: Path,
    call_timeout: Duration,
    part_bytes: u64,
    describe: String,
    /// Bounds the reads in flight: a reconnect storm can ask for thousands
    /// of blocks at once, and a local store runs each read on a blocking
    /// thread of its own.
    reads: tokio::sync::Semaphore,
    /// A `file://` store's directory, whose objects' larger ranges are
    /// read by mapping them (see [`crate::mapped`]).
    local_dir: Option<std::path::PathBuf>,
    pub stats: StoreStats,
}

/// Reads in flight against the store at most.
const MAX_CONCURRENT_READS: usize = 32;

impl std::fmt::Debug for TierStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TierStore({})", self.describe)
    }
}

/// Installs rustls' ring provider once, for the cloud clients' TLS.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Another part of the process may have installed one already.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl TierStore {
    /// Opens the store a URL names.
    pub fn open(config: &StoreConfig) -> Result<TierStore, TierError> {
        let url = url::Url::parse(&config.url)
            .map_err(|e| TierError::Config(format!("object store URL {:?}: {e}", config.url)))?;
        let retry = RetryConfig {
            max_retries: config.max_retries,
            retry_timeout: config.call_timeout,
            ..RetryConfig::default()
        };
        let mut options = vec![
            ("timeout".to_string(), "10s".to_string()),
            ("connect_timeout".to_string(), "3s".to_string()),
        ];
        options.extend(config.options.iter().cloned());
        let bad = |e: object_store::Error| TierError::Config(format!("object store: {e}"));
        let mut local_dir = None;
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match url.scheme() {
            "file" => {
                let dir = url.to_file_path().map_err(|()| {
                    TierError::Config(format!("{:?} is not a local path", config.url))
                })?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| TierError::Config(format!("creating {}: {e}", dir.display())))?;
                let local = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(bad)?
                    .with_fsync(true)
                    .with_automatic_cleanup(true);
                local_dir = Some(dir);
                (Arc::new(local), String::new())
            }
            "memory" => (
                Arc::new(object_store::memory::InMemory::new()),
                url.path().trim_matches('/').to_string(),
            ),
            "s3" | "s3a" => {
                install_crypto_provider();
                let mut builder =
                    object_store::aws::AmazonS3Builder::from_env().with_url(config.url.as_str());
                for (key, value) in &options {
                    builder = builder.with_config(key.parse().map_err(bad)?, value);
                }
                let store = builder.with_retry(retry).build().map_err(bad)?;
                (Arc::new(store), url.path().trim_matches('/').to_string())
            }
            "gs" => {
                install_crypto_provider();
                let mut builder = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(config.url.as_str());
                for (key, value) in &options {
                    builder = builder.with_config(key.parse().map_err(bad)?, value);
                }
                let store = builder.with_retry(retry).build().map_err(bad)?;
                (Arc::new(store), url.path().trim_matches('/').to_string())
            }
            "az" | "azure" | "abfs" | "abfss" => {
                install_crypto_provider();
                let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(config.url.as_str());
                for (key, value) in &options {
                    builder = builder.with_config(key.parse().map_err(bad)?, value);
                }
                let store = builder.with_retry(retry).build().map_err(bad)?;
                (Arc::new(store), url.path().trim_matches('/').to_string())
            }
            other => {
                return Err(TierError::Config(format!(
                    "object store scheme {other:?} is not supported (file, s3, gs, az, memory)"
                )))
            }
        };
        if config.read_latency.is_some() {
            // Reads go through the throttle.
            local_dir = None;
        }
        let store: Arc<dyn ObjectStore> = match config.read_latency {
            Some(wait) => Arc::new(object_store::throttle::ThrottledStore::new(
                store,
                object_store::throttle::ThrottleConfig {
                    wait_get_per_call: wait,
                    ..Default::default()
                },
            )),
            None => store,
        };
        let mut opened = TierStore::from_store(store, Path::from(prefix), config.call_timeout);
        opened.part_bytes = config.multipart_part_bytes.max(5 << 20);
        opened.describe = config.url.clone();
        opened.local_dir = local_dir;
        Ok(opened)
    }

    /// Wraps any store (tests wrap an in-memory or fault-injecting one).
    pub fn from_store(store: Arc<dyn ObjectStore>, prefix: Path, call_timeout: Duration) -> Self {
        TierStore {
            describe: format!("{store}"),
            inner: store,
            prefix,
            call_timeout,
            part_bytes: 16 << 20,
            reads: tokio::sync::Semaphore::new(MAX_CONCURRENT_READS),
            local_dir: None,
            stats: StoreStats::default(),
        }
    }

    /// Sets the multipart part size (at least 5 MiB, S3's minimum).
    pub fn with_part_bytes(mut self, bytes: u64) -> Self {
        self.part_bytes = bytes.max(5 << 20);
        self
    }

    /// The store as configured, for logs and status.
    pub fn describe(&self) -> &str {
        &self.describe
    }

    fn full(&self, path: &Path) -> Path {
        if self.prefix.as_ref().is_empty() {
            path.clone()
        } else {
            self.prefix.parts().chain(path.parts()).collect()
        }
    }

    /// Runs one call under the overall timeout and counts it.
    async fn call<T>(
        &self,
        what: &'static str,
        path: &Path,
        future: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> Result<T, TierError> {
        let started = Instant::now();
        let outcome = tokio::time::timeout(self.call_timeout, future).await;
        self.stats
            .call_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        let result = match outcome {
            Err(_) => Err(TierError::Unavailable(format!(
                "{what} {path} timed out after {:?}",
                self.call_timeout
            ))),
            Ok(Ok(value)) => Ok(value),
            Ok(Err(object_store::Error::NotFound { .. })) => {
                Err(TierError::NotFound(path.to_string()))
            }
            Ok(Err(object_store::Error::AlreadyExists { .. }))
            | Ok(Err(object_store::Error::Precondition { .. })) => {
                Err(TierError::AlreadyExists(path.to_string()))
            }
            Ok(Err(e)) => Err(TierError::Unavailable(format!("{what} {path}: {e}"))),
        };
        if matches!(result, Err(TierError::Unavailable(_))) {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Writes a new object; never replaces one (`AlreadyExists` if the
    /// name is taken). Bodies above the part size go up in parts, aborted
    /// on failure. `between_parts` runs after each part (a test hook).
    pub async fn put_new(
        &self,
        path: &Path,
        bytes: Bytes,
        mut between_parts: impl FnMut(usize),
    ) -> Result<(), TierError> {
        let full = self.full(path);
        let len = bytes.len() as u64;
        if len <= self.part_bytes {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            self.call(
                "put",
                path,
                self.inner.put_opts(&full, PutPayload::from(bytes), opts),
            )
            .await?;
        } else {
            let mut upload = self
                .call(
                    "starting a multipart upload of",
                    path,
                    self.inner
                        .put_multipart_opts(&full, PutMultipartOptions::default()),
                )
                .await?;
            let mut at = 0;
            let mut part = 0;
            let mut outcome = Ok(());
            while at < bytes.len() && outcome.is_ok() {
                let end = (at + self.part_bytes as usize).min(bytes.len());
                let payload = PutPayload::from(bytes.slice(at..end));
                outcome = self
                    .call("uploading a part of", path, upload.put_part(payload))
                    .await;
                between_parts(part);
                part += 1;
                at = end;
            }
            if outcome.is_ok() {
                outcome = self
                    .call("completing", path, upload.complete())
                    .await
                    .map(drop);
            }
            if let Err(err) = outcome {
                let _ = self
                    .call("aborting the multipart upload of", path, upload.abort())
                    .await;
                return Err(err);
            }
        }
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        self.stats.put_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Reads `range` of an object.
    pub async fn get_range(&self, path: &Path, range: Range<u64>) -> Result<Bytes, TierError> {
        let full = self.full(path);
        let _permit = self.reads.acquire().await.expect("never closed");
        let mapped = self
            .local_dir
            .as_ref()
            .filter(|_| range.end - range.start >= crate::mapped::MIN_MAPPED)
            .map(|dir| dir.join(full.as_ref()));
        let bytes = match mapped {
            Some(file) => {
                let read = crate::mapped::map_range(file, range.clone());
                self.call("get", path, read).await?
            }
            None => {
                self.call("get", path, self.inner.get_range(&full, range.clone()))
                    .await?
            }
        };
        if bytes.len() as u64 != range.end - range.start {
            return Err(TierError::Corrupt(format!(
                "{path}: asked for {} bytes at {}, got {}",
                range.end - range.start,
                range.start,
                bytes.len()
            )));
        }
        self.stats.gets.fetch_add(1, Ordering::Relaxed);
        self.stats
            .get_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Reads a whole object.
    pub async fn get(&self, path: &Path) -> Result<Bytes, TierError> {
        let full = self.full(path);
        let _permit = self.reads.acquire().await.expect("never closed");
        let bytes = self
            .call("get", path, async {
                self.inner.get(&full).await?.bytes().await
            })
            .await?;
        self.stats.gets.fetch_add(1, Ordering::Relaxed);
        self.stats
            .get_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }

    /// The size of an object.
    pub async fn size(&self, path: &Path) -> Result<u64, TierError> {
        let full = self.full(path);
        Ok(self.call("head", path, self.inner.head(&full)).await?.size)
    }

    /// Deletes an object; one that is already gone counts as deleted.
    pub async fn delete(&self, path: &Path) -> Result<(), TierError> {
        let full = self.full(path);
        match self.call("delete", path, self.inner.delete(&full)).await {
            Ok(()) | Err(TierError::NotFound(_)) => {
                self.stats.deletes.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// Every object below `prefix` (relative to the store's prefix).
    pub async fn list(&self, prefix: &Path) -> Result<Vec<Listed>, TierError> {
        let full = self.full(prefix);
        let base_parts = self.prefix.parts().count();
        let listed: Vec<object_store::ObjectMeta> = self
            .call(
                "list",
                prefix,
                self.inner.list(Some(&full)).try_collect::<Vec<_>>(),
            )
            .await?;
        Ok(listed
            .into_iter()
            .map(|meta| Listed {
                path: meta.location.parts().skip(base_parts).collect(),
                size: meta.size,
                modified_ms: meta.last_modified.timestamp_millis(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> TierStore {
        TierStore::from_store(
            Arc::new(object_store::memory::InMemory::new()),
            Path::from("base/pre"),
            Duration::from_secs(5),
        )
    }

    /// 100 reads of 1 s each at once: in virtual time they take as many
    /// seconds as waves of MAX_CONCURRENT_READS, so more in flight (or
    /// one at a time) would end at another instant.
    #[tokio::test(start_paused = true)]
    async fn reads_in_flight_are_bounded() {
        use crate::fault::{Fault, FaultStore};
        let faults = FaultStore::new(Arc::new(object_store::memory::InMemory::new()));
        let store = TierStore::from_store(faults.clone(), Path::from("p"), Duration::from_secs(60));
        let path = Path::from("x.rnc");
        store
            .put_new(&path, Bytes::from_static(b"0123456789"), |_| {})
            .await
            .unwrap();
        faults.set(Fault::Delay(Duration::from_secs(1)));
        let started = tokio::time::Instant::now();
        let reads = (0..100).map(|_| store.get_range(&path, 2..5));
        for read in futures::future::join_all(reads).await {
            assert_eq!(read.unwrap(), "234");
        }
        let waves = 100usize.div_ceil(MAX_CONCURRENT_READS) as u64;
        assert_eq!(started.elapsed().as_secs(), waves);
    }

    #[tokio::test]
    async fn puts_are_create_only_and_reads_are_ranged() {
        let store = memory();
        let path = Path::from("a/b.rnc");
        store
            .put_new(&path, Bytes::from_static(b"hello world"), |_| {})
            .await
            .unwrap();
        let again = store
            .put_new(&path, Bytes::from_static(b"other"), |_| {})
            .await;
        assert!(matches!(again, Err(TierError::AlreadyExists(_))));
        assert_eq!(store.get_range(&path, 6..11).await.unwrap(), "world");
        assert_eq!(store.get(&path).await.unwrap(), "hello world");
        assert_eq!(store.size(&path).await.unwrap(), 11);
        let listed = store.list(&Path::from("a")).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].path, path);
        store.delete(&path).await.unwrap();
        store.delete(&path).await.unwrap();
        assert!(matches!(
            store.get(&path).await,
            Err(TierError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn large_bodies_go_up_in_parts() {
        let store = memory().with_part_bytes(5 << 20);
        let body: Vec<u8> = (0..(11u32 << 20)).map(|i| (i % 251) as u8).collect();
        let mut parts = Vec::new();
        store
            .put_new(&Path::from("big"), Bytes::from(body.clone()), |p| {
                parts.push(p)
            })
            .await
            .unwrap();
        assert_eq!(parts, vec![0, 1, 2]);
        assert_eq!(store.get(&Path::from("big")).await.unwrap(), body);
    }

    #[tokio::test]
    async fn local_directories_hold_objects_under_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().join("objects").display());
        let store = TierStore::open(&StoreConfig::new(url)).unwrap();
        let path = Path::from("chunks/g0000/x.rnc");
        store
            .put_new(&path, Bytes::from_static(b"abc"), |_| {})
            .await
            .unwrap();
        assert!(matches!(
            store.put_new(&path, Bytes::from_static(b"x"), |_| {}).await,
            Err(TierError::AlreadyExists(_))
        ));
        let on_disk = dir.path().join("objects/chunks/g0000/x.rnc");
        assert_eq!(std::fs::read(on_disk).unwrap(), b"abc");
        assert_eq!(store.list(&Path::from("chunks")).await.unwrap().len(), 1);
    }

    #[test]
    fn unknown_schemes_and_options_are_refused_clearly() {
        let err = TierStore::open(&StoreConfig::new("ftp://x/y")).unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
        let mut config = StoreConfig::new("s3://bucket/p");
        config.options.push(("no_such_option".into(), "1".into()));
        assert!(TierStore::open(&config).is_err());
    }
}
