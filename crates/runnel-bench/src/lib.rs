//! `runnel bench`: the load generator for the workloads durable streams
//! servers are compared on, speaking each server's own API.
//!
//! - [`multi_stream`]: N streams, one writer each, durable appends.
//! - [`fan_out`]: one stream, one paced writer, N SSE subscribers;
//!   publish-to-receive latency per delivery.
//! - [`replay`]: N clients each fetch a pre-filled stream at once.
//! - [`baseline`]: a no-op server on the same HTTP stack (the ceiling).
//! - [`report`]: charts and a table from result files.
//! - [`log`]: the append log alone, against other write-ahead logs.
//!
//! It depends on no server internals: only HTTP.

pub mod api;
pub mod baseline;
pub mod client;
mod common;
pub mod fan_out;
pub mod history;
pub mod log;
pub mod multi_stream;
pub mod replay;
pub mod report;
pub mod sse_client;
pub mod stats;

use clap::Subcommand;

/// The one error type of the bench tool.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Usage(String),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("setup failed: {0}")]
    Setup(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// N streams, one writer each, appends with durable acknowledgements.
    MultiStream(multi_stream::Args),
    /// One stream, a paced writer, N SSE subscribers.
    FanOut(fan_out::Args),
    /// N clients fetch a full pre-filled stream each, all at once.
    Replay(replay::Args),
    /// A no-op HTTP server on the same stack: the HTTP ceiling.
    BaselineServer(baseline::Args),
    /// Charts (SVG) and a Markdown table from result JSON files.
    Report(report::Args),
    /// The append log alone: writer threads, durable acknowledgements.
    Log(log::Args),
    /// Many empty streams, as fast as the server takes them.
    Create(history::CreateArgs),
    /// Appends round-robin over many streams up to a byte total, then
    /// reads a sample back and checks every byte.
    Fill(history::FillArgs),
    /// One client reads one stream from its start to its tail (MiB/s).
    CatchUp(history::CatchUpArgs),
}

/// Runs a bench command to completion.
pub fn run(command: BenchCommand) -> Result<(), BenchError> {
    let command = match command {
        BenchCommand::Report(args) => return report::run(args),
        BenchCommand::Log(args) => return log::run(args),
        other => other,
    };
    common::raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match command {
            BenchCommand::MultiStream(args) => multi_stream::run(args).await,
            BenchCommand::FanOut(args) => fan_out::run(args).await,
            BenchCommand::Replay(args) => replay::run(args).await,
            BenchCommand::BaselineServer(args) => baseline::run(args).await,
            BenchCommand::Create(args) => history::create(args).await,
            BenchCommand::Fill(args) => history::fill(args).await,
            BenchCommand::CatchUp(args) => history::catch_up(args).await,
            BenchCommand::Report(_) | BenchCommand::Log(_) => unreachable!("handled above"),
        }
    })
}
