//! What the fuzz targets share: how an input is cut into fields
//! ([`fields`]), how the protocol's parsed headers are rendered back
//! ([`render`]), how a sequence of log entries builds a state
//! ([`entries`]), and the seed inputs of every target ([`seeds`], written
//! to `fuzz/seeds/` by `src/bin/make_seeds.rs`).
//!
//! It depends on the leaf crates only (`runnel-core`, `runnel-wire`,
//! `runnel-auth`): the fuzz build never compiles the server, the engine,
//! the tier or their dependencies.

pub mod entries;
pub mod render;
pub mod seeds;

/// Splits `data` at each `separator` into at most `n` fields (the last
/// one keeps any further separators).
pub fn fields(data: &[u8], separator: u8, n: usize) -> Vec<&[u8]> {
    data.splitn(n, |b| *b == separator).collect()
}

/// Joins fields with `separator`: what [`fields`] splits back.
pub fn join(parts: &[&[u8]], separator: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push(separator);
        }
        out.extend_from_slice(part);
    }
    out
}
