//! A fault-injecting object store for tests: wraps another store and,
//! on demand, fails, delays or hangs its calls, or flips a byte of what
//! it reads. End-to-end tests use a real S3-compatible server instead;
//! this is for unit and engine tests.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// What the store does to the next calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Every call fails (as a server error would).
    Fail,
    /// Every call waits this long first.
    Delay(Duration),
    /// Every call waits forever (callers' timeouts end it).
    Hang,
    /// Reads return their bytes with one bit flipped.
    Corrupt,
}

#[derive(Debug)]
pub struct FaultStore {
    inner: Arc<dyn ObjectStore>,
    fault: Mutex<Fault>,
    gets: AtomicU64,
    puts: AtomicU64,
}

impl fmt::Display for FaultStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultStore({})", self.inner)
    }
}

impl FaultStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<FaultStore> {
        Arc::new(FaultStore {
            inner,
            fault: Mutex::new(Fault::None),
            gets: AtomicU64::new(0),
            puts: AtomicU64::new(0),
        })
    }

    pub fn set(&self, fault: Fault) {
        *self.fault.lock().expect("fault lock") = fault;
    }

    /// Reads that reached the inner store.
    pub fn gets(&self) -> u64 {
        self.gets.load(Ordering::Relaxed)
    }

    /// Puts (single or multipart) that reached the inner store.
    pub fn puts(&self) -> u64 {
        self.puts.load(Ordering::Relaxed)
    }

    fn fault(&self) -> Fault {
        *self.fault.lock().expect("fault lock")
    }

    /// Applies the current fault before a call.
    async fn before(&self, op: &str) -> object_store::Result<Fault> {
        let fault = self.fault();
        match fault {
            Fault::Fail => Err(injected(op)),
            Fault::Delay(d) => {
                tokio::time::sleep(d).await;
                Ok(fault)
            }
            Fault::Hang => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            Fault::None | Fault::Corrupt => Ok(fault),
        }
    }
}

fn injected(op: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultStore",
        source: format!("injected failure of {op}").into(),
    }
}

#[async_trait]
impl ObjectStore for FaultStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.before("put").await?;
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.before("put_multipart").await?;
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let fault = self.before("get").await?;
        self.gets.fetch_add(1, Ordering::Relaxed);
        let result = self.inner.get_opts(location, options).await?;
        if fault != Fault::Corrupt {
            return Ok(result);
        }
        let (meta, range, attributes) = (
            result.meta.clone(),
            result.range.clone(),
            result.attributes.clone(),
        );
        let mut bytes = result.bytes().await?.to_vec();
        if let Some(last) = bytes.last_mut() {
            *last ^= 0x01;
        }
        let body = stream::once(async move { Ok(Bytes::from(bytes)) }).boxed();
        Ok(GetResult {
            payload: GetResultPayload::Stream(body),
            meta,
            range,
            attributes,
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        match self.fault() {
            Fault::None | Fault::Corrupt | Fault::Delay(_) => self.inner.delete_stream(locations),
            Fault::Fail | Fault::Hang => locations.map(|_| Err(injected("delete"))).boxed(),
        }
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        match self.fault() {
            Fault::Fail | Fault::Hang => stream::once(async { Err(injected("list")) }).boxed(),
            _ => self.inner.list(prefix),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.before("list").await?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.before("copy").await?;
        self.inner.copy_opts(from, to, options).await
    }
}
