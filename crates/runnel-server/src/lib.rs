//! Runnel's HTTP front: the Durable Streams protocol over the engine.
//!
//! This crate maps requests to engine commands and reads, and renders
//! answers: status codes and headers ([`error`], [`headers`]), catch-up and
//! long-poll reads and SSE ([`handlers`]), cursors ([`cursor`]), what
//! shared caches may keep of each answer ([`cache`]), the
//! entry point that routes requests and adds the headers every response
//! carries ([`routes`]), what `/metrics` counts ([`metrics`]), who
//! may do what ([`auth`]), and the subscription APIs with their webhook
//! and pull-wake delivery ([`subscriptions`]). It holds no stream state of its own.

pub mod cache;
pub mod cancel_budget;
pub mod connection;
pub mod console;
pub mod direct_connection;
pub mod error;
pub mod fan_out;
pub mod forward;
pub mod handlers;
pub mod listener;
pub mod memory;
pub mod metrics;
pub mod routes;
pub mod subscriptions;
mod tls;
pub mod unread_body;

// Access control, and the protocol's parsers, are leaf crates (the fuzz
// targets build against them without the server); the server's modules
// reach them by their old paths.
pub use runnel_auth as auth;
pub use runnel_wire::{cursor, headers};

use std::sync::Arc;
use std::time::Duration;

use runnel_engine::NodeEngine;

/// Limits and timings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// How long a long-poll waits for data before answering 204.
    pub long_poll_timeout: Duration,
    /// Largest request body (PUT or POST); larger bodies get 413.
    pub max_append_bytes: u64,
    /// Most bytes one read response (or one SSE data event) carries.
    pub max_read_bytes: u64,
    /// Largest snapshot body; larger get 413.
    pub max_snapshot_bytes: u64,
    /// Most message bytes after the snapshot in one bootstrap response.
    pub max_bootstrap_bytes: u64,
    /// Most bytes a fork across groups copies from its source (the copy is
    /// one log record of the fork's group); larger forks get 413.
    pub max_fork_copy_bytes: u64,
    /// Interval of SSE keepalive comments.
    pub sse_keepalive: Duration,
    /// An SSE connection is closed after this long; clients resume from
    /// their last control offset.
    pub sse_max_duration: Duration,
    /// A connection whose peer accepts no bytes for this long while the
    /// server has some to send is closed (a stuck SSE reader is cut off and
    /// resumes by offset).
    pub write_stall_timeout: Duration,
    /// A connection that sends no complete request for this long, between
    /// requests or in the middle of one, is closed.
    pub request_read_timeout: Duration,
    /// Open connections; more wait in the accept backlog.
    pub max_connections: usize,
    /// HTTP/2 requests one connection may cancel at once, and cancels it
    /// earns back each second, before it is closed ([`cancel_budget`]).
    pub http2_cancel_burst: u32,
    pub http2_cancels_per_sec: u32,
    /// Concurrent SSE and long-poll readers; more get 503 + Retry-After.
    pub max_live_readers: usize,
    /// Resident memory of the process above which new SSE and long-poll
    /// readers get 503 + Retry-After (none: no limit).
    pub max_memory_bytes: Option<u64>,
    /// The server's URL as clients reach it (`https://streams.example`):
    /// subscription responses and webhook bodies name URLs under it. Without
    /// one, the URL a request came in on is used.
    pub public_url: Option<String>,
    /// Whether clients reach this node over HTTPS (the scheme of URLs made
    /// from a request's Host).
    pub https: bool,
    /// Where webhooks may be sent besides public `https://` hosts.
    pub webhook_policy: runnel_core::subscription::UrlPolicy,
    /// How long one webhook delivery may take before it counts as failed.
    pub webhook_timeout: Duration,
    /// Serve the web console at `/console`.
    pub console: bool,
    /// How long a request that meets a leadership change in a cluster is
    /// retried inside the cluster before the client gets a 503.
    pub leader_wait: Duration,
    /// What shared caches may keep of read answers (docs/caching.md).
    pub cache: cache::CachePolicy,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            long_poll_timeout: Duration::from_secs(30),
            max_append_bytes: 64 << 20,
            max_read_bytes: 1 << 20,
            max_snapshot_bytes: 128 << 20,
            max_bootstrap_bytes: 64 << 20,
            max_fork_copy_bytes: 64 << 20,
            sse_keepalive: Duration::from_secs(15),
            sse_max_duration: Duration::from_secs(60),
            write_stall_timeout: Duration::from_secs(10),
            request_read_timeout: Duration::from_secs(30),
            max_connections: 50_000,
            http2_cancel_burst: 1_000,
            http2_cancels_per_sec: 250,
            max_live_readers: 40_000,
            max_memory_bytes: None,
            public_url: None,
            https: false,
            webhook_policy: Default::default(),
            webhook_timeout: Duration::from_secs(10),
            console: true,
            leader_wait: Duration::from_secs(10),
            cache: cache::CachePolicy::default(),
        }
    }
}

/// What every handler gets: one shared [`App`], so the clone each request
/// and connection takes is a single reference count.
#[derive(Clone)]
pub struct AppState(Arc<App>);

impl AppState {
    /// A handle that does not keep the application alive: background tasks
    /// hold one and end once the server is gone.
    pub fn downgrade(&self) -> std::sync::Weak<App> {
        Arc::downgrade(&self.0)
    }

    pub fn upgrade(weak: &std::sync::Weak<App>) -> Option<AppState> {
        weak.upgrade().map(AppState)
    }
}

impl std::ops::Deref for AppState {
    type Target = App;
    fn deref(&self) -> &App {
        &self.0
    }
}

impl App {
    /// Whether anyone may read stream `name`, so that shared caches may
    /// hand its answers to anyone: always without access control, else
    /// when the auth file's anonymous grants allow reading it.
    pub fn readable_by_anyone(&self, name: &str) -> bool {
        self.auth
            .as_ref()
            .is_none_or(|auth| auth.readable_by_anyone(name))
    }

    /// Sets the cache headers of a read `answer` on stream `name`.
    pub fn cache_headers(&self, headers: &mut http::HeaderMap, answer: cache::Answer, name: &str) {
        let public = answer == cache::Answer::Never || self.readable_by_anyone(name);
        self.cache_headers.apply(headers, answer, public);
    }
}

pub struct App {
    pub node: Arc<dyn NodeEngine>,
    /// Relays requests to the leader of a stream's group (clusters).
    pub forwarder: forward::Forwarder,
    pub config: Arc<ServerConfig>,
    /// One permit per live reader (SSE or long-poll).
    pub live_readers: Arc<tokio::sync::Semaphore>,
    /// SSE events rendered once for all readers at a stream position.
    pub sse_cache: Arc<handlers::SseRenderCache>,
    /// The hubs writing to caught-up SSE readers on plain connections.
    pub fan_out: Arc<fan_out::FanOut>,
    /// Refuses new live readers while the process is over its memory limit.
    pub memory: Arc<memory::MemoryGuard>,
    /// This node's name for the `Runnel-Served-By` header.
    pub served_by: http::HeaderValue,
    /// What `/metrics` reports of the HTTP layer.
    pub metrics: Arc<metrics::Metrics>,
    /// Access control, when the server runs with an auth file.
    pub auth: Option<Arc<auth::Auth>>,
    /// The `Cache-Control` values of read answers, rendered from
    /// `config.cache` once.
    pub cache_headers: cache::CacheHeaders,
    /// Subscriptions: signing keys in use and webhook delivery.
    pub subscriptions: subscriptions::Service,
}

/// The application over `node`: what [`serve`] answers requests with.
pub fn app(node: Arc<dyn NodeEngine>, config: ServerConfig) -> AppState {
    app_with(node, config, AppOptions::default())
}

/// What an application may have besides its engine and limits.
#[derive(Default)]
pub struct AppOptions {
    /// Access control (`--auth-file`).
    pub auth: Option<Arc<auth::Auth>>,
    /// The cluster's mutual TLS, for forwarding to leaders.
    pub cluster_tls: Option<Arc<runnel_tls::ClusterTls>>,
}

/// [`app`] with `options`.
pub fn app_with(node: Arc<dyn NodeEngine>, config: ServerConfig, options: AppOptions) -> AppState {
    let AppOptions { auth, cluster_tls } = options;
    let served_by = http::HeaderValue::from_str(&node.node_label())
        .unwrap_or_else(|_| http::HeaderValue::from_static("unnamed"));
    let state = AppState(Arc::new(App {
        node,
        served_by,
        forwarder: match &cluster_tls {
            Some(tls) => forward::Forwarder::with_tls(tls.client_config()),
            None => forward::Forwarder::default(),
        },
        live_readers: Arc::new(tokio::sync::Semaphore::new(config.max_live_readers.max(1))),
        sse_cache: Arc::default(),
        fan_out: Arc::default(),
        memory: memory::MemoryGuard::start(config.max_memory_bytes),
        metrics: Arc::default(),
        cache_headers: cache::CacheHeaders::new(&config.cache),
        auth,
        subscriptions: subscriptions::Service::new(&config.webhook_policy, config.webhook_timeout),
        config: Arc::new(config),
    }));
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(handlers::release_expired_pins(state.downgrade()));
        runtime.spawn(subscriptions::deliver(state.downgrade()));
    }
    state
}

/// Serves `app` on `listener` with `config`'s connection limits until
/// `shutdown` resolves, then lets open requests finish (at most 10 s).
///
/// The accept loop is Runnel's own rather than `axum::serve`: ordinary
/// HTTP/1.1 requests with small bodies or none, SSE reads and appends
/// among them, are served without hyper ([`connection`]) until a
/// connection carries anything else; from then on hyper serves it, with
/// its per-connection buffers at their smallest. Both hand requests to
/// [`routes::handle`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: &ServerConfig,
    app: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, config, app, None, shutdown).await
}

/// [`serve`], over TLS when `tls` is given: a connection that negotiates
/// HTTP/2 through ALPN is served by hyper's HTTP/2 server; any other goes
/// the HTTP/1.1 way, direct path included, inside TLS.
///
/// The server's future is boxed here, with the shutdown signal, so that
/// the server (connections, routes, handlers) is compiled once, in this
/// crate: the body of an async function is otherwise compiled again in
/// every crate that awaits it.
pub fn serve_with<'a>(
    listener: tokio::net::TcpListener,
    config: &'a ServerConfig,
    app: AppState,
    tls: Option<Arc<runnel_tls::rustls::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> futures::future::BoxFuture<'a, std::io::Result<()>> {
    serve_boxed(listener, config, app, tls, Box::pin(shutdown))
}

/// Not generic, so that the coercion below makes this crate compile the
/// server's future (a generic function is compiled where it is used).
fn serve_boxed<'a>(
    listener: tokio::net::TcpListener,
    config: &'a ServerConfig,
    app: AppState,
    tls: Option<Arc<runnel_tls::rustls::ServerConfig>>,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> futures::future::BoxFuture<'a, std::io::Result<()>> {
    Box::pin(serve_until(listener, config, app, tls, shutdown))
}

async fn serve_until(
    listener: tokio::net::TcpListener,
    config: &ServerConfig,
    app: AppState,
    tls: Option<Arc<runnel_tls::rustls::ServerConfig>>,
    shutdown: futures::future::BoxFuture<'static, ()>,
) -> std::io::Result<()> {
    use axum::serve::Listener;
    use hyper::server::conn::http1::Builder;
    use hyper_util::rt::TokioTimer;

    let mut listener = listener::LimitedListener::new(
        listener,
        config.max_connections,
        config.write_stall_timeout,
    );
    let mut builder = Builder::new();
    // The smallest read buffer hyper allows; requests larger than it are
    // still read, in several passes. HTTP/1.1 only: protocol detection
    // for cleartext HTTP/2 would hold a buffer of its own per connection.
    builder
        .max_buf_size(8192)
        .timer(TokioTimer::new())
        .header_read_timeout(config.request_read_timeout);
    let h2 = tls::http2_builder(config);
    let acceptor = tls.map(runnel_tls::tokio_rustls::TlsAcceptor::from);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // Connections served outside hyper end when this turns true; each holds
    // a receiver, so the sender sees when the last one is gone.
    let (stop_direct, direct_stopped) = tokio::sync::watch::channel(false);
    let mut shutdown = shutdown;
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = &mut shutdown => break,
        };
        let (app, builder, watcher, stop) = (
            app.clone(),
            builder.clone(),
            graceful.watcher(),
            direct_stopped.clone(),
        );
        let read_timeout = config.request_read_timeout;
        let peer = auth::PeerAddr(peer.ip());
        let Some(acceptor) = &acceptor else {
            app.metrics.connection(metrics::Protocol::Http1);
            tokio::spawn(serve_connection(
                io,
                peer,
                app,
                builder,
                watcher,
                stop,
                read_timeout,
            ));
            continue;
        };
        let (acceptor, h2) = (acceptor.clone(), h2.clone());
        tokio::spawn(async move {
            // A handshake gets as long as a request head.
            let accepted = tokio::time::timeout(read_timeout, acceptor.accept(io)).await;
            let stream = match accepted {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!("TLS handshake timed out"),
            };
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                app.metrics.connection(metrics::Protocol::Http2Tls);
                tls::serve_http2(stream, peer, app, h2, watcher).await;
            } else {
                app.metrics.connection(metrics::Protocol::Http1Tls);
                serve_connection(stream, peer, app, builder, watcher, stop, read_timeout).await;
            }
        });
    }
    drop(direct_stopped);
    let _ = stop_direct.send(true);
    let drained = async {
        graceful.shutdown().await;
        stop_direct.closed().await;
    };
    if tokio::time::timeout(Duration::from_secs(10), drained)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after 10 s of shutdown; closing them");
    }
    Ok(())
}

/// One connection: requests served here one after another while they are
/// ordinary ones ([`connection`]), then hyper for the rest of it.
async fn serve_connection<I>(
    io: I,
    peer: auth::PeerAddr,
    app: AppState,
    builder: hyper::server::conn::http1::Builder,
    watcher: hyper_util::server::graceful::Watcher,
    stop: tokio::sync::watch::Receiver<bool>,
    read_timeout: Duration,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + fan_out::IntoShared + Send + 'static,
{
    use hyper_util::rt::TokioIo;

    let Some((io, prefix)) = serve_directly(io, peer, app.clone(), stop, read_timeout).await else {
        return;
    };
    let io = TokioIo::new(connection::Rewind::new(prefix, io));
    let served = Box::pin(watcher.watch(builder.serve_connection(io, hyper_service(app, peer))));
    if let Err(e) = served.await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// The application as a hyper service for a connection from `peer`.
fn hyper_service<B>(
    app: AppState,
    peer: auth::PeerAddr,
) -> impl hyper::service::Service<
    http::Request<B>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl std::future::Future<
        Output = Result<axum::response::Response, std::convert::Infallible>,
    > + Send
                 + 'static,
> + Clone
where
    B: hyper::body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    hyper::service::service_fn(move |mut request: http::Request<B>| {
        request.extensions_mut().insert(peer);
        let (parts, body) = request.into_parts();
        let (kept, body) = unread_body::keep(axum::body::Body::new(body));
        let answer = routes::handle(app.clone(), http::Request::from_parts(parts, body));
        async move {
            let response = answer.await;
            // A body the answer left unread is ended before the answer
            // goes out (see `unread_body`).
            kept.drain().await;
            Ok::<_, std::convert::Infallible>(response)
        }
    })
}

/// Serves an SSE answer on the server's own path: through the stream's
/// hub when the connection can share its socket (plain TCP), otherwise
/// by polling the answer's body.
async fn serve_sse<I>(
    io: I,
    response: axum::response::Response,
    stop: tokio::sync::watch::Receiver<bool>,
    common: &[u8],
) -> std::io::Result<()>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + fan_out::IntoShared,
{
    let slot = response
        .extensions()
        .get::<handlers::sse::SseTail>()
        .cloned();
    let Some((slot, tail)) = slot.and_then(|slot| slot.take().map(|tail| (slot, tail))) else {
        return direct_connection::serve(io, response, stop, common).await;
    };
    match io.into_shared() {
        Ok(socket) => fan_out::serve(socket, response, tail, stop, common).await,
        Err(io) => {
            slot.put_back(tail);
            direct_connection::serve(io, response, stop, common).await
        }
    }
}

/// Serves the requests of a connection that this path takes; returns the
/// connection and the bytes already read of the first request it does not
/// take, for hyper, or `None` once the connection is over.
async fn serve_directly<I>(
    mut io: I,
    peer: auth::PeerAddr,
    app: AppState,
    stop: tokio::sync::watch::Receiver<bool>,
    read_timeout: Duration,
) -> Option<(I, bytes::Bytes)>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + fan_out::IntoShared,
{
    use connection::NextRequest;

    // Made once: re-registering with the shutdown signal and the timer for
    // every request would cost more than reading the request. (Moving a
    // registered deadline later does not touch the timer wheel.)
    let mut watched = stop.clone();
    let mut stopping = std::pin::pin!(watched.wait_for(|stopping| *stopping));
    let mut idle = std::pin::pin!(tokio::time::sleep(read_timeout));
    // The application's future is boxed: held inline it would make every
    // connection's task as large as the largest handler, for its whole
    // life, idle SSE readers included.
    let respond = |mut request: http::Request<axum::body::Body>| {
        request.extensions_mut().insert(peer);
        Box::pin(routes::respond(app.clone(), request))
    };
    let common = routes::protocol_head();
    let mut received = bytes::Bytes::new();
    loop {
        // A connection still silent at shutdown, or that sends no whole
        // request in time, is closed, as hyper closes its idle ones.
        idle.as_mut()
            .reset(tokio::time::Instant::now() + read_timeout);
        let next = tokio::select! {
            next = connection::read_request(&mut io, received) => next,
            _ = &mut stopping => NextRequest::Gone,
            _ = &mut idle => NextRequest::Gone,
        };
        match next {
            NextRequest::Sse(request) => {
                let response = respond(connection::sse_request(*request)).await;
                // The later stages of a connection are boxed, here and
                // below: held inline, each would make every connection's
                // task as large as the largest of them for its whole
                // life, a kept-alive connection waiting for a request
                // included (3 KiB rather than 1.2 KiB).
                if let Err(e) = Box::pin(serve_sse(io, response, stop, common)).await {
                    tracing::debug!(error = %e, "SSE connection ended with an error");
                }
                return None;
            }
            NextRequest::Plain {
                request,
                keep_alive,
            } => {
                let answered = match handlers::append_directly(&app, request, peer) {
                    Ok(appending) => {
                        Box::pin(direct_connection::answer(
                            &mut io, appending, false, keep_alive, common,
                        ))
                        .await
                    }
                    Err(request) => {
                        let head_only = request.method() == http::Method::HEAD;
                        let request = match connection::into_request(*request) {
                            Ok(request) => request,
                            // Parts the `http` types reject: hyper answers.
                            Err(whole) => return Some((io, whole)),
                        };
                        let responding = respond(request);
                        let answering =
                            async move { direct_connection::Answer::Response(responding.await) };
                        Box::pin(direct_connection::answer(
                            &mut io, answering, head_only, keep_alive, common,
                        ))
                        .await
                    }
                };
                match answered {
                    Ok(direct_connection::AfterAnswer::KeepAlive(early)) => received = early,
                    Ok(direct_connection::AfterAnswer::Closed) => return None,
                    Err(e) => {
                        tracing::debug!(error = %e, "connection ended with an error");
                        return None;
                    }
                }
            }
            NextRequest::Other(prefix) => return Some((io, prefix)),
            NextRequest::Gone => return None,
        }
    }
}
