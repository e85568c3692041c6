//! What crosses Runnel's wire, parsed: the pure parsers and codecs for
//! bytes that arrive from outside a node, below both the HTTP server and
//! the engine.
//!
//! - [`headers`]: the protocol's header names, and the parsing of request
//!   headers (producer triple, TTL, expiry, closure, integers), query
//!   strings and stream paths;
//! - [`cursor`]: stream cursors for CDN collapsing;
//! - [`connection`]: the direct path's request-head reader (which
//!   requests the server serves without hyper), generic over tokio's IO
//!   traits;
//! - [`raft`]: the Raft transport's frames, request bodies and hello,
//!   with the openraft type configuration their requests are made of.
//!
//! Errors are typed ([`ProtocolError`], [`raft::frame::RequestError`],
//! [`raft::hello::HelloDecodeError`]); the server maps them to HTTP
//! statuses in its one place (`runnel-server`'s `error.rs`).
//!
//! Layering: this crate depends on `runnel-core` only (and on openraft for
//! the request types); `runnel-engine` and `runnel-server` depend on it,
//! never the reverse. It is small on purpose: the fuzz targets
//! (`fuzz/`) build against it without the server's and the engine's
//! dependencies.

pub mod connection;
pub mod cursor;
pub mod error;
pub mod headers;
pub mod raft;

pub use error::ProtocolError;
