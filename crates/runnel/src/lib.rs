//! The `runnel` command line, configuration file, and wiring of engine and
//! HTTP server, as a library so that the test-only binary `runnel-faulty`
//! runs exactly this with its fault hooks armed. Logic worth testing lives
//! in the crates below.

mod allocator;
mod config;
mod ctl;
mod join;
mod streams;

/// Turns transparent huge pages off for this process. mimalloc asks for
/// them, and then every fresh 2 MiB region a thread touches is zeroed
/// whole: a burst of blocking threads (object-store reads, one per
/// request) spent three quarters of its time there. Measured with
/// `bench/replay-pair.sh` (200 clients reading tiered streams at once):
/// p50 197 ms with huge pages, 63 ms without.
fn disable_transparent_huge_pages() {
    // SAFETY: prctl with integer arguments only; a failure (an old
    // kernel) leaves the setting as it was, which is harmless.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

use std::process::ExitCode;

use std::sync::Arc;

use clap::{Parser, Subcommand};
use config::ServeArgs;
use runnel_engine::cluster::{ClusterConfig, ClusterNode};
use runnel_engine::NodeEngine;

#[derive(Parser)]
#[command(
    name = "runnel",
    version,
    about = "A durable HTTP streams server (Durable Streams protocol)"
)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// Run the server (single node; data in ./runnel-data by default).
    Serve(Box<ServeArgs>),
    /// Load generator for the published workloads, against any server.
    Bench {
        #[command(subcommand)]
        command: runnel_bench::BenchCommand,
    },
    /// Operator commands against a running node.
    Ctl {
        #[command(subcommand)]
        command: ctl::CtlCommand,
    },
    /// List, create, append to, read, tail and delete streams.
    Stream(streams::StreamArgs),
}

/// openraft logs every failed RPC to a down peer; the transport logs when
/// a peer becomes unreachable and reachable again instead.
const DEFAULT_LOG_FILTER: &str = "info,openraft=off";

/// Runs the command line `std::env::args()` gives; the `runnel` binary's
/// `main`.
pub fn run() -> ExitCode {
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUNNEL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER)),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Commands::Stream(args) = cli.command {
        return match streams::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("runnel: {}", e.message);
                ExitCode::from(e.code)
            }
        };
    }
    let result = match cli.command {
        Commands::Serve(args) => serve(*args),
        Commands::Bench { command } => runnel_bench::run(command).map_err(|e| e.to_string()),
        Commands::Ctl { command } => ctl::run(command),
        Commands::Stream(_) => unreachable!("answered above"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("runnel: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Connections the kernel completes before the server accepts them. A
/// reconnect storm opens thousands at once; with tokio's default (1024)
/// the excess SYNs are dropped and those clients retry a second later.
/// The kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 16_384;

fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let mut settings = args.resolve()?;
    join::learn_cluster(&mut settings)?;
    raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(allocator::worker_parked)
        .on_thread_stop(allocator::thread_stopping)
        .thread_keep_alive(allocator::IDLE_THREAD_KEEP_ALIVE)
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    allocator::start_purging();
    runnel_server::memory::report_allocator_with(allocator::report);
    runtime.block_on(async move {
        let listener = listen(settings.listen)
            .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
        let node: Arc<dyn NodeEngine> = match &settings.cluster {
            None => {
                restore(&mut settings).await?;
                runnel_engine::Node::open(&settings.engine).map_err(|e| e.to_string())?
            }
            Some(cluster) => {
                let mut config = ClusterConfig::new(
                    settings.engine.clone(),
                    cluster.node_id,
                    cluster.peers.clone(),
                );
                if let Some(timeout) = cluster.election_timeout {
                    config.election_timeout = (timeout, timeout * 2);
                    config.heartbeat = timeout / 6;
                }
                config.tls = settings.cluster_tls.clone();
                config.cluster_id = cluster.cluster_id.clone();
                config.replication = cluster.replication;
                config.zones = cluster.zones.clone();
                config.zone = cluster.zone.clone();
                config.dead_node_after = cluster.dead_node_after;
                config.finalize_upgrade = cluster.finalize_upgrade;
                config.rebalance_after = cluster.rebalance_after;
                if settings.restore {
                    let from = runnel_engine::cluster::restore::prepare(
                        &config,
                        settings.restore_from.as_deref(),
                    )
                    .await
                    .map_err(|e| format!("restore: {e}"))?;
                    tracing::warn!(
                        from = %from,
                        "restoring cluster {from} from the object store: a new cluster forms and each group takes its newest backup"
                    );
                }
                ClusterNode::open(&config)
                    .await
                    .map_err(|e| e.to_string())?
            }
        };
        if let Some(cluster) = &settings.cluster {
            if let Some(join) = cluster.join.clone() {
                let node_id = cluster.node_id;
                // Through the member it joined by, once this node answers.
                tokio::task::spawn_blocking(move || match join::become_member(&join, node_id) {
                    Ok((held, groups)) => {
                        tracing::info!(held, groups, "joined: holds its share of the groups")
                    }
                    Err(reason) => tracing::error!(
                        %reason,
                        "joining stopped; start this node again, or finish with \
                         `runnel ctl node add`"
                    ),
                });
            }
        }
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        tracing::info!(listen = %local, data_dir = %settings.engine.data_dir.display(), "serving");
        let listener_tls = match (&settings.tls, &settings.cluster_tls) {
            (None, None) => None,
            (public, cluster) => Some(
                runnel_tls::http_server_config(public.clone(), cluster.as_deref())
                    .map_err(|e| e.to_string())?,
            ),
        };
        tokio::spawn(reload_on_sighup(Reloadable {
            auth: settings.auth.clone(),
            tls: settings.tls.clone(),
            cluster_tls: settings.cluster_tls.clone(),
        }));
        let options = runnel_server::AppOptions {
            auth: settings.auth.clone(),
            cluster_tls: settings.cluster_tls.clone(),
        };
        let app = runnel_server::app_with(node, settings.server.clone(), options);
        runnel_server::serve_with(
            listener,
            &settings.server,
            app,
            listener_tls,
            shutdown_signal(),
        )
        .await
        .map_err(|e| format!("server failed: {e}"))
    })
}

/// Restores an empty data directory from the object store's newest
/// checkpoint, when asked to or when the store holds one.
/// The node opens with the backup's group count unless `--groups` chose
/// one (the default for this machine may differ from the backed-up
/// node's).
async fn restore(settings: &mut config::Settings) -> Result<(), String> {
    let restored = runnel_engine::tier::backup::restore_node(
        &settings.engine,
        settings.restore,
        settings.groups_given,
    )
    .await
    .map_err(|e| format!("restore: {e}"))?;
    if let Some(r) = restored {
        settings.engine.groups = r.groups;
        tracing::warn!(
            checkpoint = %r.checkpoint,
            streams = r.streams,
            lost_bytes = r.lost_bytes,
            "restored the data directory from the object store; untiered tails were lost"
        );
    }
    Ok(())
}

/// What SIGHUP re-reads.
struct Reloadable {
    auth: Option<Arc<runnel_server::auth::Auth>>,
    tls: Option<Arc<runnel_tls::ReloadableCert>>,
    cluster_tls: Option<Arc<runnel_tls::ClusterTls>>,
}

/// Re-reads the auth file and the certificates on each SIGHUP. A file
/// with mistakes leaves what is in force in force, and the log says why;
/// open connections keep their certificate.
async fn reload_on_sighup(reloadable: Reloadable) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("no SIGHUP handler: the auth file and certificates are read once");
        return;
    };
    while hangups.recv().await.is_some() {
        let report = |what: &str, result: Result<(), String>| match result {
            Ok(()) => tracing::info!("{what} reloaded"),
            Err(e) => {
                tracing::error!(error = %e, "{what} not reloaded; the old one stays in force")
            }
        };
        if let Some(auth) = &reloadable.auth {
            report("auth file", auth.reload().map_err(|e| e.to_string()));
        }
        if let Some(tls) = &reloadable.tls {
            report("TLS certificate", tls.reload().map_err(|e| e.to_string()));
        }
        if let Some(cluster) = &reloadable.cluster_tls {
            report(
                "cluster certificate",
                cluster.reload().map_err(|e| e.to_string()),
            );
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}

/// Live readers hold a socket each: allow as many as the hard limit does.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                tracing::warn!("could not raise the open-file limit");
            }
        }
    }
}
