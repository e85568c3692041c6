//! The power-loss test: cycles of write, cut power, kill, revive, restart,
//! read everything back.
//!
//! Each cycle: the server (already running) gets its streams re-created
//! (`PUT`, 200 if they exist), the idempotent writers' in-doubt appends
//! retried with their old seq, and the previous cycle's ephemeral stream
//! deleted and a new one created (so checkpoints find dead data to
//! compact and collect). Then the writers (per stream one idempotent
//! producer and one plain writer that never repeats an append, and several
//! on the ephemeral stream) append for a random time, power is cut while
//! they do ([`super::cut`]: at a write to the log, or as soon as written
//! data is unsynced), the server is SIGKILLed, the file system revived and
//! the server restarted, and every stream is read back and checked
//! ([`super::readback`]); deleted streams must stay deleted.
//!
//! A cycle also fails, as `UNTESTED`, if it acknowledged no append or if
//! its cut dropped no written byte; and as `VIOLATION refused-appends` if,
//! before the cut, the server answered more appends with errors than with
//! success. Every error answer is counted, and leaves its append in doubt.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::{Client, StatusCode};

use super::check::Writer;
use super::client::{self, Answers, WriterSetup};
use super::cut::{self, CutPlan};
use super::error::{HarnessError, Result};
use super::readback::verify;
use super::server::Server;
use super::verdict::{Findings, Kind, Untested};
use super::{control, replay_hint, Target};

#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    /// At least one.
    pub cycles: usize,
    pub seed: u64,
    pub streams: usize,
    /// Writers run for a random time in this range (ms) before the cut.
    pub write_ms: (u64, u64),
    /// Chance (0-100) that power fails during a write to a log segment,
    /// keeping a torn prefix of it; the other cuts come as soon as some
    /// written data is unsynced, half of them keeping a torn prefix of
    /// some file's last unsynced write.
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

/// How long a cut waits for its moment.
const CUT_PATIENCE: Duration = Duration::from_secs(2);
/// How long reading back tries again a stream whose read fails with a 5xx.
const READ_PATIENCE: Duration = Duration::from_secs(3);
/// A writer's rest after an error answer.
const ERROR_PAUSE: Duration = Duration::from_millis(20);

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
    totals: Totals,
}

/// Sums over the cycles, for the last line.
#[derive(Default)]
struct Totals {
    acked: usize,
    errors_before: usize,
    errors_after: usize,
    landed: usize,
    missing: usize,
    torn: usize,
    bytes_dropped: u64,
    written_dropped: u64,
}

/// One cycle's outcome.
struct Cycle {
    findings: Findings,
    line: String,
}

/// Runs the cycles. `Ok(true)`: every cycle passed; `Ok(false)`: a cycle
/// failed (its `VIOLATION`/`UNTESTED` lines printed); `Err`: the harness
/// could not run.
pub async fn run(opts: Options) -> Result<bool> {
    if opts.cycles == 0 {
        return Err(HarnessError::Setup(
            "at least one cycle is needed: a run of no cycles tests nothing".into(),
        ));
    }
    println!(
        "power-loss: seed {}; {} cycles; {} serve --data-dir {} {}",
        opts.seed,
        opts.cycles,
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
        totals: Totals::default(),
        opts,
    };
    let result = run.all_cycles().await;
    if let Some(server) = run.server.take() {
        server.kill().await;
    }
    let stats = control(&run.opts.target.control, "stats")
        .await
        .unwrap_or_default();
    let t = &run.totals;
    let summary = format!(
        "{} appends acknowledged, {} answered with errors before the cuts and {} after; in doubt {} landed / {} not; the cuts dropped {} B ({} B written data; {} torn writes kept); file system: {} writes, {} fsyncs, {} directory fsyncs",
        t.acked, t.errors_before, t.errors_after, t.landed, t.missing, t.bytes_dropped,
        t.written_dropped, t.torn, stats["writes"], stats["fsyncs"], stats["dir_fsyncs"]
    );
    let cycles = run.opts.cycles;
    match result {
        Ok(None) => {
            println!("power-loss: PASS: {cycles} of {cycles} cycles passed; {summary}");
            Ok(true)
        }
        Ok(Some((cycle, first))) => {
            println!(
                "power-loss: FAIL at cycle {cycle} of {cycles} ({} passed): {first}; {summary}",
                cycle - 1
            );
            println!(
                "power-loss: server log {}; {}",
                run.opts.target.log.display(),
                replay_hint(run.opts.seed)
            );
            Ok(false)
        }
        Err(e) => {
            println!(
                "power-loss: ERROR: {e}; {summary}; server log {}; {}",
                run.opts.target.log.display(),
                replay_hint(run.opts.seed)
            );
            Err(e)
        }
    }
}

impl Run {
    /// `None` when every cycle passed; else the failed cycle and its first
    /// finding.
    async fn all_cycles(&mut self) -> Result<Option<(usize, String)>> {
        self.setup().await?;
        let cycles = self.opts.cycles;
        for n in 1..=cycles {
            let started = Instant::now();
            let outcome = tokio::time::timeout(self.opts.cycle_timeout, self.cycle(n))
                .await
                .map_err(|_| {
                    HarnessError::Timeout(format!("cycle {n}"), self.opts.cycle_timeout)
                })?;
            let c = outcome?;
            let elapsed = started.elapsed().as_secs_f64();
            if c.findings.is_empty() {
                println!("cycle {n}/{cycles}: ok: {} ({elapsed:.1}s)", c.line);
            } else {
                println!("cycle {n}/{cycles}: FAIL: {} ({elapsed:.1}s)", c.line);
                c.findings.print(&format!("cycle {n}"), 10);
                return Ok(Some((n, c.findings.first())));
            }
            if self.server.is_none() {
                return Ok(Some((n, "the server is gone".into())));
            }
        }
        Ok(None)
    }

    fn base(&self) -> String {
        self.server
            .as_ref()
            .map(|s| s.base.clone())
            .unwrap_or_default()
    }

    async fn setup(&mut self) -> Result<()> {
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
            let status = client::create(&self.client, &self.base(), &stream).await?;
            if status != StatusCode::CREATED {
                return Err(HarnessError::Answer {
                    what: format!("creating {stream} at the first start"),
                    status: status.as_u16(),
                    expected: "201".into(),
                });
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
    /// in-doubt appends.
    async fn prepare(&mut self, cycle: usize, findings: &mut Findings) {
        let base = self.base();
        for stream in &self.streams {
            match client::create(&self.client, &base, stream).await {
                Ok(StatusCode::OK) => {}
                Ok(status) => findings.violation(
                    Kind::WrongAnswer,
                    format!("PUT {stream} (which exists): {status}, expected 200"),
                ),
                Err(e) => findings.violation(Kind::WrongAnswer, e.to_string()),
            }
        }
        // Retries first: the ephemeral stream they may be for goes next.
        for w in self.writers.iter_mut() {
            if let Some(landed) = w.needs_retry() {
                if let Some(v) = client::retry_pending(&self.client, &base, w, landed, true).await {
                    findings.violations.push(v);
                }
            }
        }
        if let Some(old) = self.ephemeral.take() {
            match client::delete(&self.client, &base, &old).await {
                Ok(status) if status.is_success() => {
                    self.writers.retain(|w| w.stream != old);
                    self.deleted.push(old);
                }
                Ok(status) => {
                    findings.violation(Kind::WrongAnswer, format!("DELETE {old}: {status}"))
                }
                Err(e) => findings.violation(Kind::WrongAnswer, e.to_string()),
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
            Ok(status) => findings.violation(
                Kind::WrongAnswer,
                format!("PUT {name}: {status}, expected 201"),
            ),
            Err(e) => findings.violation(Kind::WrongAnswer, e.to_string()),
        }
    }

    fn live_streams(&self) -> Vec<String> {
        self.streams
            .iter()
            .cloned()
            .chain(self.ephemeral.clone())
            .collect()
    }

    /// One of three ways (see [`Options::torn_percent`]), from the seed.
    fn choose_cut(&mut self) -> CutPlan {
        let roll = self.rng.gen_range(0..100);
        let seed = self.rng.gen::<u32>();
        let torn_percent = self.opts.torn_percent;
        if roll < torn_percent {
            CutPlan::AtWrite {
                path: "/data/log/0".into(),
                torn: Some(seed),
            }
        } else if roll < torn_percent + (100 - torn_percent) / 2 {
            CutPlan::Unsynced { torn: Some(seed) }
        } else {
            CutPlan::Unsynced { torn: None }
        }
    }

    async fn cycle(&mut self, cycle: usize) -> Result<Cycle> {
        let mut findings = Findings::default();
        self.prepare(cycle, &mut findings).await;
        let acked_before: usize = self.writers.iter().map(Writer::acked).sum();

        // Write, and cut the power while the writers are at it.
        let live = self.live_streams();
        let setup = WriterSetup {
            client: self.client.clone(),
            bases: Arc::new(vec![self.base()]),
            stop: Arc::default(),
            cutting: Arc::default(),
            pause: self.opts.pause,
            error_pause: ERROR_PAUSE,
            fault_at: None,
            fresh_duplicate_is_wrong: true,
        };
        let (writing, idle): (Vec<Writer>, Vec<Writer>) = std::mem::take(&mut self.writers)
            .into_iter()
            .partition(|w| live.contains(&w.stream));
        let tasks: Vec<_> = writing
            .into_iter()
            .map(|w| tokio::spawn(client::run_writer(setup.clone(), w)))
            .collect();
        let write_ms = self
            .rng
            .gen_range(self.opts.write_ms.0..=self.opts.write_ms.1);
        tokio::time::sleep(Duration::from_millis(write_ms)).await;
        let plan = self.choose_cut();
        setup.cutting.store(true, Ordering::Release);
        let cut = cut::cut_power(&self.opts.target.control, &plan, CUT_PATIENCE).await?;
        if let Some(server) = self.server.take() {
            server.kill().await;
        }
        setup.stop.store(true, Ordering::Release);
        let mut answers = Answers::default();
        for task in tasks {
            let (w, a, v) = tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .map_err(|_| HarnessError::Timeout("a writer".into(), Duration::from_secs(30)))?
                .map_err(|e| HarnessError::Task(e.to_string()))?;
            findings.extend(v);
            answers.merge(a);
            self.writers.push(w);
        }
        self.writers.extend(idle);
        self.writers.sort_by_key(|w| w.id);
        control(&self.opts.target.control, "revive").await?;
        let acked = self.writers.iter().map(Writer::acked).sum::<usize>() - acked_before;
        self.count(acked, &answers, &cut);
        judge_cycle(acked, &answers, &cut, &mut findings);

        // Restart and check.
        let restart_started = Instant::now();
        let label = format!("cycle {cycle} restart");
        let server = match Server::start(&self.opts.target.spec(), &self.client, &label).await {
            Ok(server) => server,
            Err(e) => {
                findings.violation(
                    Kind::ServerDied,
                    format!("restart after the power cut ({}): {e}", cut::describe(&cut)),
                );
                let line = format!("cut {plan}: {}; no restart", cut::describe(&cut));
                return Ok(Cycle { findings, line });
            }
        };
        let restart = restart_started.elapsed().as_secs_f64();
        let base = server.base.clone();
        self.server = Some(server);
        let verified = verify(&self.client, &base, &live, &mut self.writers, READ_PATIENCE).await;
        findings.extend(verified.violations);
        for old in &self.deleted {
            let read = client::read_all(&self.client, &base, old).await;
            match (read.bytes, read.cut_short) {
                (None, _) => {}
                (Some(_), None) => findings.violation(
                    Kind::DeletedStreamBack,
                    format!("stream {old}, deleted (acknowledged), is back"),
                ),
                (Some(_), Some(e)) => findings.violation(
                    Kind::DeletedStreamBack,
                    format!("stream {old}, deleted (acknowledged), is not gone: {e}"),
                ),
            }
        }
        if let Some(status) = self.server.as_mut().and_then(Server::exited) {
            findings.violation(
                Kind::ServerDied,
                format!(
                    "the restarted server died while the streams were read back ({status}); its log ends:\n{}",
                    super::server::log_tail(&self.opts.target.log, 5)
                ),
            );
            self.server = None;
        }
        self.totals.landed += verified.landed;
        self.totals.missing += verified.missing;
        let tiered = match client::tiered(&self.client, &base).await {
            Some((chunks, bytes)) => format!("; tiered {chunks} chunks, {} KiB", bytes / 1024),
            None => String::new(),
        };
        let line = format!(
            "wrote {write_ms} ms: {acked} acked, {} errors before the cut, {} after ({}); in doubt {} landed / {} not; cut {plan}: {}; restart {restart:.2}s; read back {} KiB{tiered}",
            answers.errors_before,
            answers.errors_after,
            answers.summary(),
            verified.landed,
            verified.missing,
            cut::describe(&cut),
            verified.bytes / 1024
        );
        Ok(Cycle { findings, line })
    }

    fn count(&mut self, acked: usize, answers: &Answers, cut: &crate::model::CutReport) {
        let t = &mut self.totals;
        t.acked += acked;
        t.errors_before += answers.errors_before;
        t.errors_after += answers.errors_after;
        t.bytes_dropped += cut.bytes_dropped;
        t.written_dropped += cut.written_bytes_dropped;
        t.torn += usize::from(cut.torn.is_some());
    }
}

/// The rules that make a cycle a test: something acknowledged, something
/// written lost by the cut, and a server that acknowledged at least as
/// many appends as it refused before the cut.
pub fn judge_cycle(
    acked: usize,
    answers: &Answers,
    cut: &crate::model::CutReport,
    findings: &mut Findings,
) {
    if acked == 0 {
        findings.untested(
            Untested::NoAcknowledgedAppend,
            format!(
                "no append was acknowledged, so the cut could lose nothing acknowledged (answers: {})",
                answers.summary()
            ),
        );
    }
    if cut.written_bytes_dropped == 0 {
        findings.untested(
            Untested::NoDroppedBytes,
            format!(
                "the power cut dropped no written byte ({}): nothing written was waiting to be synced",
                cut::describe(cut)
            ),
        );
    }
    if answers.refused_too_many() {
        findings.violation(
            Kind::RefusedAppends,
            format!(
                "before the power cut, {} appends were answered with errors and only {} acknowledged ({})",
                answers.errors_before,
                answers.ok_before,
                answers.summary()
            ),
        );
    }
}
