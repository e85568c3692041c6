//! `runnel bench`: the load generator for the workloads durable streams
//! servers are compared on, speaking each server's own API.
//!
//! - [`multi_stream`]: N streams, one writer each, durable appends.
//! - [`fan_out`]: one stream, one paced writer, N SSE or long-poll
//!   subscribers ([`long_poll`]), directly or through a cache;
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
pub mod leaders;
pub mod log;
pub mod long_poll;
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
    /// One stream, a paced writer, N SSE or long-poll subscribers,
    /// directly or through a cache (`--via`).
    FanOut(fan_out::Args),
    /// N clients fetch a full pre-filled stream each, all at once (the
    /// published benchmark calls it `bootstrap`).
    #[command(alias = "bootstrap")]
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::BenchCommand;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: BenchCommand,
    }

    fn parse(line: &str) -> BenchCommand {
        let words = std::iter::once("bench").chain(line.split_whitespace());
        Cli::try_parse_from(words)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .command
    }

    /// The commands the published benchmark prints run unchanged.
    #[test]
    fn the_published_benchmark_commands_parse() {
        match parse("fan-out --subscribers 1000 --writer-rate 50 --duration-secs 30") {
            BenchCommand::FanOut(args) => {
                assert_eq!((args.subscribers, args.writer_rate), (1000, 50.0));
                assert_eq!(args.common.duration_secs, 30.0);
            }
            other => panic!("{other:?}"),
        }
        match parse("multi-stream --streams 500 --duration-secs 30 --payload-bytes 256") {
            BenchCommand::MultiStream(args) => assert_eq!(args.streams, 500),
            other => panic!("{other:?}"),
        }
        match parse("bootstrap --clients 1000 --pre-events 200 --per-client-stream") {
            BenchCommand::Replay(args) => {
                assert_eq!((args.clients, args.pre_events), (1000, 200));
                assert!(args.per_client_stream);
            }
            other => panic!("{other:?}"),
        }
        match parse("replay --per-client-stream false") {
            BenchCommand::Replay(args) => assert!(!args.per_client_stream),
            other => panic!("{other:?}"),
        }
    }
}
