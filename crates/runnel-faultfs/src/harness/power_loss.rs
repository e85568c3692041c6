//! The power-loss test: cycles of write, cut power, kill, revive, restart,
//! read everything back.
//!
//! Each cycle: the server (already running) gets its streams re-created
//! (`PUT`, 200 if they exist), the idempotent writers' in-doubt appends
//! retried with their old seq, and the previous cycle's ephemeral stream
//! deleted and a new one created (so checkpoints find dead data to
//! compact and collect). Then the writers (per stream one idempotent
//! producer and one plain writer that never retries, and several on the
//! ephemeral stream) append
//! for a random time, power is cut while they do, the server is
//! SIGKILLed, the file system revived and the server restarted, and every
//! stream is read back and checked ([`super::check`]); deleted streams must
//! stay deleted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::{Client, StatusCode};

use super::check::Writer;
use super::client::{self, OnError};
use super::server::Server;
use super::{control, describe_cut, print_violations, verify, Target};

#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    pub cycles: usize,
    pub seed: u64,
    pub streams: usize,
    /// Writers run for a random time in this range (ms) before the cut.
    pub write_ms: (u64, u64),
    /// Chance (0-100) that power fails during a write to a log segment,
    /// keeping a torn prefix of it; the other cuts are instant, half of
    /// them keeping a torn prefix of some file's last unsynced write.
    pub torn_percent: u32,
    /// Each writer rests a random time up to this between appends.
    pub pause: Duration,
    /// Writers (alternately plain and idempotent) of the stream created
    /// each cycle and deleted the next: with more of them than the fixed
    /// streams' writers, segments end up mostly dead, so checkpoints copy
    /// their live bytes forward and delete them.
    pub ephemeral_writers: usize,
    /// Create the data directory and fsync its parent before the first
    /// start, instead of leaving that to the server (for servers that do
    /// not sync new directories).
    pub prepare_data_dir: bool,
    /// Wait until the server's log directory is durable before the first
    /// cut (for servers that do not sync new directories).
    pub wait_log_dir: bool,
    /// A cycle that takes longer fails.
    pub cycle_timeout: Duration,
}

struct Run {
    opts: Options,
    client: Client,
    rng: StdRng,
    server: Option<Server>,
    streams: Vec<String>,
    writers: Vec<Writer>,
    next_writer: u32,
    /// The stream deleted next cycle, and the deleted ones.
    ephemeral: Option<String>,
    deleted: Vec<String>,
    acked: usize,
    landed: usize,
    missing: usize,
    torn: usize,
    bytes_dropped: u64,
}

/// One cycle's outcome.
struct Cycle {
    violations: Vec<String>,
    line: String,
}

pub async fn run(opts: Options) -> Result<(), String> {
    println!(
        "power-loss: {} cycles, seed {}, {} serve --data-dir {} {}",
        opts.cycles,
        opts.seed,
        opts.target.binary.display(),
        opts.target.data_dir().display(),
        opts.target.flags.join(" ")
    );
    let mut run = Run {
        client: client::client(),
        rng: StdRng::seed_from_u64(opts.seed),
        server: None,
        streams: (0..opts.streams)
            .map(|i| format!("power-loss-{i}"))
            .collect(),
        writers: Vec::new(),
        next_writer: 0,
        ephemeral: None,
        deleted: Vec::new(),
        acked: 0,
        landed: 0,
        missing: 0,
        torn: 0,
        bytes_dropped: 0,
        opts,
    };
    let result = run.all_cycles().await;
    if let Some(server) = run.server.take() {
        server.kill().await;
    }
    let stats = control(&run.opts.target.control, "stats")
        .await
        .unwrap_or_default();
    let summary = format!(
        "{} appends acknowledged, in-doubt appends {} landed / {} not, {} bytes dropped by power cuts ({} torn writes kept); file system: {} writes, {} fsyncs, {} directory fsyncs",
        run.acked, run.landed, run.missing, run.bytes_dropped, run.torn,
        stats["writes"], stats["fsyncs"], stats["dir_fsyncs"]
    );
    match result {
        Ok(()) => {
            println!(
                "power-loss: PASS: {} of {} cycles passed; {summary}",
                run.opts.cycles, run.opts.cycles
            );
            Ok(())
        }
        Err((cycle, why)) => {
            println!(
                "power-loss: FAIL at cycle {cycle} of {} ({} passed): {why}; {summary}",
                run.opts.cycles,
                cycle.saturating_sub(1)
            );
            println!("power-loss: server log: {}", run.opts.target.log.display());
            Err(why)
        }
    }
}

impl Run {
    async fn all_cycles(&mut self) -> Result<(), (usize, String)> {
        self.setup().await.map_err(|e| (0, e))?;
        for cycle in 1..=self.opts.cycles {
            let started = Instant::now();
            let outcome = tokio::time::timeout(self.opts.cycle_timeout, self.cycle(cycle)).await;
            let elapsed = started.elapsed().as_secs_f64();
            match outcome {
                Err(_) => {
                    println!(
                        "cycle {cycle}/{}: FAIL: took longer than {:?}",
                        self.opts.cycles, self.opts.cycle_timeout
                    );
                    return Err((cycle, "timeout".into()));
                }
                Ok(Err(e)) => {
                    println!("cycle {cycle}/{}: FAIL: {e}", self.opts.cycles);
                    return Err((cycle, e));
                }
                Ok(Ok(c)) if !c.violations.is_empty() => {
                    println!(
                        "cycle {cycle}/{}: FAIL: {} ({elapsed:.1}s)",
                        self.opts.cycles, c.line
                    );
                    print_violations(&c.violations, 10);
                    return Err((
                        cycle,
                        format!(
                            "{} violations, first: {}",
                            c.violations.len(),
                            c.violations[0]
                        ),
                    ));
                }
                Ok(Ok(c)) => println!(
                    "cycle {cycle}/{}: ok: {} ({elapsed:.1}s)",
                    self.opts.cycles, c.line
                ),
            }
        }
        Ok(())
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("a running server")
    }

    async fn setup(&mut self) -> Result<(), String> {
        let target = &self.opts.target;
        if self.opts.prepare_data_dir {
            super::prepare_data_dir(target)?;
        }
        let server = Server::start(&target.spec(), &self.client, "first start").await?;
        self.server = Some(server);
        if self.opts.wait_log_dir {
            let limit = Duration::from_secs(30);
            if !super::wait_durable(&target.control, "/data/log", limit).await? {
                println!("power-loss: warning: /data/log was still not durable after {limit:?}");
            }
        }
        for stream in self.streams.clone() {
            let status = client::create(&self.client, &self.server().base, &stream).await?;
            if status != StatusCode::CREATED {
                return Err(format!("creating {stream}: {status}"));
            }
            for idempotent in [true, false] {
                self.writers
                    .push(Writer::new(self.next_writer, &stream, idempotent));
                self.next_writer += 1;
            }
        }
        Ok(())
    }

    /// Re-creates the streams, rotates the ephemeral one and retries
    /// in-doubt idempotent appends.
    async fn prepare(&mut self, cycle: usize) -> Vec<String> {
        let mut violations = Vec::new();
        let base = self.server().base.clone();
        for stream in &self.streams {
            match client::create(&self.client, &base, stream).await {
                Ok(StatusCode::OK) => {}
                Ok(status) => violations.push(format!(
                    "PUT {stream} (which exists): {status}, expected 200"
                )),
                Err(e) => violations.push(e),
            }
        }
        // Retries first: the ephemeral stream they may be for goes next.
        for w in self.writers.iter_mut() {
            if let Some(landed) = w.needs_retry() {
                if let Err(e) = client::retry_pending(&self.client, &base, w, landed).await {
                    violations.push(e);
                }
            }
        }
        if let Some(old) = self.ephemeral.take() {
            match client::delete(&self.client, &base, &old).await {
                Ok(status) if status.is_success() => {
                    self.writers.retain(|w| w.stream != old);
                    self.deleted.push(old);
                }
                Ok(status) => violations.push(format!("DELETE {old}: {status}")),
                Err(e) => violations.push(e),
            }
        }
        let name = format!("ephemeral-{cycle}");
        match client::create(&self.client, &base, &name).await {
            Ok(StatusCode::CREATED) => {
                for i in 0..self.opts.ephemeral_writers {
                    self.writers
                        .push(Writer::new(self.next_writer, &name, i % 2 == 1));
                    self.next_writer += 1;
                }
                self.ephemeral = Some(name);
            }
            Ok(status) => violations.push(format!("PUT {name}: {status}, expected 201")),
            Err(e) => violations.push(e),
        }
        violations
    }

    fn live_streams(&self) -> Vec<String> {
        self.streams
            .iter()
            .cloned()
            .chain(self.ephemeral.clone())
            .collect()
    }

    /// Cuts power one of three ways (see [`Options::torn_percent`]);
    /// returns the cut's report.
    async fn cut_power(&mut self) -> Result<serde_json::Value, String> {
        let socket = self.opts.target.control.clone();
        let roll = self.rng.gen_range(0..100);
        let seed = self.rng.gen::<u32>();
        if roll < self.opts.torn_percent {
            control(
                &socket,
                &format!("power-cut-at-write /data/log/0 torn {seed}"),
            )
            .await?;
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                let stats = control(&socket, "stats").await?;
                if stats["alive"] == false {
                    return Ok(stats["last_cut"].clone());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            // No log write came: cut now (this also disarms).
            control(&socket, "power-cut").await
        } else if roll < self.opts.torn_percent + (100 - self.opts.torn_percent) / 2 {
            control(&socket, &format!("power-cut torn {seed}")).await
        } else {
            control(&socket, "power-cut").await
        }
    }

    async fn cycle(&mut self, cycle: usize) -> Result<Cycle, String> {
        let mut violations = self.prepare(cycle).await;
        let acked_before: usize = self.writers.iter().map(Writer::acked).sum();

        // Write, and cut the power while the writers are at it.
        let live = self.live_streams();
        let base = self.server().base.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        let mut idle = Vec::new();
        for w in std::mem::take(&mut self.writers) {
            if live.contains(&w.stream) {
                tasks.push(tokio::spawn(client::run_writer(
                    self.client.clone(),
                    base.clone(),
                    w,
                    Arc::clone(&stop),
                    OnError::Stop,
                    None,
                    self.opts.pause,
                )));
            } else {
                idle.push(w);
            }
        }
        let write_ms = self
            .rng
            .gen_range(self.opts.write_ms.0..=self.opts.write_ms.1);
        tokio::time::sleep(Duration::from_millis(write_ms)).await;
        let cut = self.cut_power().await?;
        self.server.take().expect("a running server").kill().await;
        stop.store(true, Ordering::Release);
        for task in tasks {
            let (w, _answers, v) = tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .map_err(|_| "a writer did not stop within 30 s".to_string())?
                .map_err(|e| format!("a writer panicked: {e}"))?;
            violations.extend(v);
            self.writers.push(w);
        }
        self.writers.extend(idle);
        self.writers.sort_by_key(|w| w.id);
        control(&self.opts.target.control, "revive").await?;
        let acked = self.writers.iter().map(Writer::acked).sum::<usize>() - acked_before;
        self.acked += acked;
        self.bytes_dropped += cut["bytes_dropped"].as_u64().unwrap_or(0);
        self.torn += usize::from(cut["torn"].is_object());

        // Restart and check.
        let restart_started = Instant::now();
        let server = Server::start(
            &self.opts.target.spec(),
            &self.client,
            &format!("cycle {cycle} restart"),
        )
        .await
        .map_err(|e| format!("restart after the power cut ({}): {e}", describe_cut(&cut)))?;
        let restart = restart_started.elapsed().as_secs_f64();
        self.server = Some(server);
        let base = self.server().base.clone();
        let verified = verify(&self.client, &base, &live, &mut self.writers).await;
        violations.extend(verified.violations);
        for old in &self.deleted {
            match client::read_all(&self.client, &base, old).await {
                Ok(None) => {}
                Ok(Some(_)) => {
                    violations.push(format!("stream {old}, deleted (acknowledged), is back"))
                }
                Err(e) => violations.push(format!("reading deleted stream {old}: {e}")),
            }
        }
        if let Some(status) = self.server.as_mut().and_then(Server::exited) {
            violations.push(format!(
                "the restarted server died while the streams were read back ({status}); its log ends:\n{}",
                super::server::log_tail(&self.opts.target.log, 5)
            ));
        }
        self.landed += verified.landed;
        self.missing += verified.missing;
        let tiered = match client::tiered(&self.client, &base).await {
            Some((chunks, bytes)) => format!("; tiered {chunks} chunks, {} KiB", bytes / 1024),
            None => String::new(),
        };
        let line = format!(
            "wrote {write_ms} ms, {acked} acked, in doubt {} landed / {} not; cut {}; restart {restart:.2}s; read back {} KiB{tiered}",
            verified.landed,
            verified.missing,
            describe_cut(&cut),
            verified.bytes / 1024
        );
        Ok(Cycle { violations, line })
    }
}
