//! The cluster power-loss test: a three-node cluster on loopback whose
//! node 3 keeps its data on the fault file system, and loses power in the
//! middle of a replica move that involves it.
//!
//! The cluster runs with a replication factor of two, so each data group
//! lives on two of the three nodes and a move always has somewhere to go.
//! Each cycle: writers (per stream an idempotent producer and a plain
//! writer) append through every node; a data group is picked and its
//! replica moved onto node 3 or off it ([`moves::plan`]); at a chosen
//! phase of the move (adding, added, removing) node 3's power is cut at a
//! moment that loses written data ([`crate::harness::cut`]), the node is
//! SIGKILLed, the file system revived and the node restarted; the move is
//! finished as an operator would, by running `runnel ctl node move` again
//! until it is done; then the writers stop, the cluster must agree on a
//! leader for every group, and every stream is read back through every
//! node: each acknowledged append there, in order, exactly once
//! ([`crate::harness::check`]), the nodes agreeing. At the end the whole
//! history goes through `runnel_history::check` and every node must take
//! an append and serve it. A cycle also fails as `UNTESTED` when it
//! acknowledged nothing or its cut dropped no written byte.
//!
//! One answer a single node never gives is right here: a producer's new
//! seq answered 204 (duplicate). The node a client reached retries an
//! append at the group's new leader when the first attempt may have
//! landed, and the leader's deduplication answers the retry 204; the
//! append is there once, which reading back checks.
//!
//! | module | owns |
//! |---|---|
//! | [`nodes`] | the three server processes, their addresses, the groups' voters and leaders |
//! | [`moves`] | which replica moves, when the power fails during it, finishing it with `runnel ctl` |

pub mod moves;
pub mod nodes;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::{Client, StatusCode};

use super::check::{Fate, Writer};
use super::client::{self, Answers, WriterSetup};
use super::cut::{self, CutPlan};
use super::error::{HarnessError, Result};
use super::power_loss::judge_cycle;
use super::readback::{judge, read_patiently, Verified};
use super::verdict::{Findings, Kind, Violation};
use super::{control, replay_hint};
use moves::{Move, Phase};
use nodes::Nodes;

#[derive(Clone, Debug)]
pub struct Options {
    pub binary: PathBuf,
    pub mount: PathBuf,
    pub control: PathBuf,
    /// The other nodes' data directories and every node's log go here.
    pub workdir: PathBuf,
    /// More `serve` flags for every node.
    pub flags: Vec<String>,
    /// At least one.
    pub cycles: usize,
    pub seed: u64,
    pub streams: usize,
    /// Writers run for a random time in this range (ms) before the move.
    pub write_ms: (u64, u64),
    pub pause: Duration,
    pub cycle_timeout: Duration,
}

/// The node on the fault file system.
const FAULTY: u64 = 3;
const READ_PATIENCE: Duration = Duration::from_secs(5);
const FINISH_WITHIN: Duration = Duration::from_secs(40);
const SETTLE_WITHIN: Duration = Duration::from_secs(30);

struct Run {
    opts: Options,
    client: Client,
    rng: StdRng,
    nodes: Nodes,
    streams: Vec<String>,
    writers: Vec<Writer>,
    /// What node 1 read back last, per stream.
    finals: BTreeMap<String, Vec<u8>>,
    origin: Instant,
    totals: Totals,
}

#[derive(Default)]
struct Totals {
    acked: usize,
    errors_before: usize,
    errors_after: usize,
    landed: usize,
    missing: usize,
    written_dropped: u64,
    ctl_runs: usize,
    moves: BTreeMap<&'static str, usize>,
}

/// `Ok(true)`: every cycle passed; `Ok(false)`: one failed (its verdict
/// lines printed); `Err`: the harness could not run.
pub async fn run(opts: Options) -> Result<bool> {
    if opts.cycles == 0 {
        return Err(HarnessError::Setup(
            "at least one cycle is needed: a run of no cycles tests nothing".into(),
        ));
    }
    println!(
        "cluster-power-loss: seed {}; {} cycles; 3 nodes of {} (node {FAULTY} on the fault file system) {}",
        opts.seed,
        opts.cycles,
        opts.binary.display(),
        opts.flags.join(" ")
    );
    let client = client::client();
    super::prepare_dir(&opts.mount.join("data"))?;
    // Each data group on two of the three nodes, so a move has somewhere
    // to go; four groups: group 0 and three data groups.
    let mut flags = opts.flags.clone();
    for (flag, value) in [("--replication-factor", "2"), ("--groups", "4")] {
        let given = |f: &String| f == flag || f.starts_with(&format!("{flag}="));
        if !opts.flags.iter().any(given) {
            flags.extend([flag.to_string(), value.to_string()]);
        }
    }
    let nodes = Nodes::start(
        &opts.binary,
        &opts.workdir,
        FAULTY,
        opts.mount.join("data"),
        &flags,
        &client,
    )
    .await?;
    let mut run = Run {
        client,
        rng: StdRng::seed_from_u64(opts.seed),
        nodes,
        streams: (0..opts.streams)
            .map(|i| format!("cluster-power-loss-{i}"))
            .collect(),
        writers: Vec::new(),
        finals: BTreeMap::new(),
        origin: Instant::now(),
        totals: Totals::default(),
        opts,
    };
    let result = run.all_cycles().await;
    run.nodes.stop().await;
    let t = &run.totals;
    let moves: Vec<String> = t.moves.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let summary = format!(
        "{} appends acknowledged, {} answered with errors before the cuts and {} after; in doubt {} landed / {} not; the cuts dropped {} B of written data; moves cut {}; {} ctl runs to finish them",
        t.acked, t.errors_before, t.errors_after, t.landed, t.missing, t.written_dropped,
        moves.join(", "), t.ctl_runs
    );
    let cycles = run.opts.cycles;
    let logs = run.opts.workdir.display();
    match result {
        Ok(None) => {
            println!("cluster-power-loss: PASS: {cycles} of {cycles} cycles passed; {summary}");
            Ok(true)
        }
        Ok(Some(failed)) => {
            println!("cluster-power-loss: FAIL: {failed}; {summary}");
            println!(
                "cluster-power-loss: node logs in {logs}; {}",
                replay_hint(run.opts.seed)
            );
            Ok(false)
        }
        Err(e) => {
            println!(
                "cluster-power-loss: ERROR: {e}; {summary}; node logs in {logs}; {}",
                replay_hint(run.opts.seed)
            );
            Err(e)
        }
    }
}

impl Run {
    /// `None` when every cycle and the final checks passed; else what
    /// failed first.
    async fn all_cycles(&mut self) -> Result<Option<String>> {
        self.nodes
            .wait_for_leaders(&self.client, SETTLE_WITHIN)
            .await?;
        self.setup().await?;
        let cycles = self.opts.cycles;
        for n in 1..=cycles {
            let started = Instant::now();
            let (findings, line) = tokio::time::timeout(self.opts.cycle_timeout, self.cycle(n))
                .await
                .map_err(|_| {
                    HarnessError::Timeout(format!("cycle {n}"), self.opts.cycle_timeout)
                })??;
            let elapsed = started.elapsed().as_secs_f64();
            if findings.is_empty() {
                println!("cycle {n}/{cycles}: ok: {line} ({elapsed:.1}s)");
            } else {
                println!("cycle {n}/{cycles}: FAIL: {line} ({elapsed:.1}s)");
                findings.print(&format!("cycle {n}"), 10);
                return Ok(Some(format!("cycle {n}: {}", findings.first())));
            }
        }
        let findings = self.final_checks().await;
        if findings.is_empty() {
            return Ok(None);
        }
        findings.print("end", 10);
        Ok(Some(format!("at the end: {}", findings.first())))
    }

    fn healthy_base(&mut self) -> String {
        let id = self.rng.gen_range(1..FAULTY);
        self.nodes.base(id)
    }

    async fn setup(&mut self) -> Result<()> {
        let base = self.nodes.base(1);
        for stream in self.streams.clone() {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let status = client::create(&self.client, &base, &stream).await;
                match status {
                    Ok(s) if s == StatusCode::CREATED => break,
                    _ if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(200)).await
                    }
                    Ok(s) => {
                        return Err(HarnessError::Answer {
                            what: format!("creating {stream}"),
                            status: s.as_u16(),
                            expected: "201".into(),
                        })
                    }
                    Err(e) => return Err(e),
                }
            }
            let id = self.writers.len() as u32;
            self.writers.push(Writer::new(id, &stream, true));
            self.writers.push(Writer::new(id + 1, &stream, false));
        }
        Ok(())
    }

    async fn cycle(&mut self, n: usize) -> Result<(Findings, String)> {
        let mut findings = Findings::default();
        let base = self.healthy_base();
        for w in self.writers.iter_mut() {
            if let Some(landed) = w.needs_retry() {
                if let Some(v) = client::retry_pending(&self.client, &base, w, landed, false).await
                {
                    findings.violations.push(v);
                }
            }
        }
        let acked_before: usize = self.writers.iter().map(Writer::acked).sum();
        let setup = WriterSetup {
            client: self.client.clone(),
            bases: Arc::new(self.nodes.bases()),
            stop: Arc::default(),
            cutting: Arc::default(),
            pause: self.opts.pause,
            error_pause: Duration::from_millis(50),
            fault_at: None,
            fresh_duplicate_is_wrong: false,
        };
        let tasks: Vec<_> = std::mem::take(&mut self.writers)
            .into_iter()
            .map(|w| tokio::spawn(client::run_writer(setup.clone(), w)))
            .collect();
        let write_ms = self
            .rng
            .gen_range(self.opts.write_ms.0..=self.opts.write_ms.1);
        tokio::time::sleep(Duration::from_millis(write_ms)).await;

        // The move, and the cut in its middle.
        let (mv, phase) = self.plan_move().await?;
        *self.totals.moves.entry(phase_name(phase)).or_default() += 1;
        let target = self.healthy_base();
        let (pending, cut) = self.move_and_cut(&target, mv, phase, &setup).await?;
        let back_started = Instant::now();
        self.nodes.kill(FAULTY).await;
        control(&self.opts.control, "revive").await?;
        if let Err(e) = self
            .nodes
            .restart(FAULTY, &self.client, &format!("cycle {n} restart"))
            .await
        {
            setup.stop.store(true, Ordering::Release);
            findings.violation(
                Kind::ServerDied,
                format!("node {FAULTY} after the power cut: {e}"),
            );
            return Ok((findings, format!("move {mv}, cut {phase}: no restart")));
        }
        let back = back_started.elapsed().as_secs_f64();

        // Finish the move as an operator would.
        let to_addr = self.nodes.addrs[&mv.to].clone();
        let finished = {
            let (nodes, client) = (&self.nodes, &self.client);
            moves::finish(
                &self.opts.binary,
                &target,
                mv,
                &to_addr,
                FINISH_WITHIN,
                || nodes.layout(client),
            )
            .await
        };
        if let Some(task) = pending {
            task.abort();
        }
        let finish_note = match finished {
            Ok(f) => {
                self.totals.ctl_runs += f.runs;
                format!("finished by {} ctl runs in {:.1}s", f.runs, f.seconds)
            }
            Err(moves::Unfinished::Harness(e)) => return Err(e),
            Err(e) => {
                findings.violation(Kind::MoveUnfinished, format!("move {mv}: {e}"));
                "not finished".into()
            }
        };

        // Stop writing; the cluster must settle and agree.
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
        self.writers.sort_by_key(|w| w.id);
        let acked = self.writers.iter().map(Writer::acked).sum::<usize>() - acked_before;
        if let Err(e) = self
            .nodes
            .wait_for_leaders(&self.client, SETTLE_WITHIN)
            .await
        {
            findings.violation(Kind::Unavailable, e.to_string());
        }
        let verified = self.read_back(&mut findings).await;
        if let Some((id, status)) = self.nodes.exited() {
            findings.violation(
                Kind::ServerDied,
                format!(
                    "node {id} exited ({status}); see {}",
                    self.nodes.log(id).display()
                ),
            );
        }
        judge_cycle(acked, &answers, &cut, &mut findings);
        self.count(acked, &answers, &cut, &verified);
        let line = format!(
            "wrote {write_ms} ms; move {mv}, power cut {phase} ({}); node {FAULTY} back in {back:.2}s; move {finish_note}; {acked} acked, {} errors before the cut, {} after ({}); in doubt {} landed / {} not; read back {} KiB through each node",
            cut::describe(&cut),
            answers.errors_before,
            answers.errors_after,
            answers.summary(),
            verified.landed,
            verified.missing,
            verified.bytes / 1024
        );
        Ok((findings, line))
    }

    /// A move involving the faulty node, once the groups' placement is
    /// settled (a move or a leader change of the cluster's own may be
    /// under way for a moment).
    async fn plan_move(&mut self) -> Result<(Move, Phase)> {
        let deadline = Instant::now() + SETTLE_WITHIN;
        loop {
            let layout = self.nodes.layout(&self.client).await;
            if let Some(planned) = moves::plan(&layout, &[1, 2, 3], FAULTY, &mut self.rng) {
                return Ok(planned);
            }
            if Instant::now() > deadline {
                return Err(HarnessError::Setup(format!(
                    "no data group with a settled placement to move: {layout:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Takes the move's steps up to `phase` and cuts the faulty node's
    /// power there. Returns the step still in flight (if any) and the cut.
    async fn move_and_cut(
        &mut self,
        target: &str,
        mv: Move,
        phase: Phase,
        setup: &WriterSetup,
    ) -> Result<(Option<tokio::task::JoinHandle<()>>, crate::model::CutReport)> {
        let client = self.client.clone();
        let (g, addr) = (mv.group, self.nodes.addrs[&mv.to].clone());
        // Failures of these steps are left to `finish`, as an operator
        // would leave them to the next `ctl` run.
        let _ = moves::step(&client, target, g, &format!("lead-away={}", mv.from)).await;
        let add = format!("add={}&addr={addr}", mv.to);
        let spawn = |query: String| {
            let (client, target) = (client.clone(), target.to_string());
            tokio::spawn(async move {
                let _ = moves::step(&client, &target, g, &query).await;
            })
        };
        let torn = self.rng.gen_bool(0.5).then(|| self.rng.gen::<u32>());
        let delay = Duration::from_millis(self.rng.gen_range(0..=40));
        let mut plan = CutPlan::Unsynced { torn };
        let pending = match phase {
            Phase::Adding => Some(spawn(add)),
            Phase::Added => {
                let _ = moves::step(&client, target, g, &add).await;
                None
            }
            Phase::Removing => {
                let _ = moves::step(&client, target, g, &add).await;
                if mv.from == FAULTY {
                    // The giving node drops its copy: cut at that write.
                    plan = CutPlan::AtWrite {
                        path: "/data/left-groups".into(),
                        torn,
                    };
                }
                Some(spawn(format!("remove={}", mv.from)))
            }
        };
        if plan == (CutPlan::Unsynced { torn }) {
            tokio::time::sleep(delay).await;
        }
        setup.cutting.store(true, Ordering::Release);
        // A giving node drops its copy once it learns it was removed,
        // which takes it a couple of seconds.
        let patience = Duration::from_secs(if plan == (CutPlan::Unsynced { torn }) {
            1
        } else {
            6
        });
        let cut = cut::cut_power(&self.opts.control, &plan, patience).await?;
        Ok((pending, cut))
    }

    /// Reads every stream through every node: node 1's view is judged
    /// against the writers' histories, the others must equal it.
    async fn read_back(&mut self, findings: &mut Findings) -> Verified {
        let mut verified = Verified::default();
        let ids: Vec<u64> = self.nodes.addrs.keys().copied().collect();
        let deadline = Instant::now() + READ_PATIENCE;
        for stream in self.streams.clone() {
            let mut views = Vec::new();
            for &id in &ids {
                let base = self.nodes.base(id);
                views.push(read_patiently(&self.client, &base, &stream, deadline).await);
            }
            let contents: Vec<Option<Vec<u8>>> = views.iter().map(|r| r.bytes.clone()).collect();
            if contents.iter().any(|c| *c != contents[0]) {
                let lens: Vec<Option<usize>> =
                    contents.iter().map(|c| c.as_ref().map(Vec::len)).collect();
                findings.violation(
                    Kind::NodesDisagree,
                    format!("stream {stream}: nodes {ids:?} answer different contents (lengths {lens:?})"),
                );
            }
            judge(
                &stream,
                views.swap_remove(0),
                &mut self.writers,
                &mut verified,
            );
        }
        findings.extend(std::mem::take(&mut verified.violations));
        self.finals = verified.contents.clone();
        verified
    }

    fn count(
        &mut self,
        acked: usize,
        answers: &Answers,
        cut: &crate::model::CutReport,
        v: &Verified,
    ) {
        let t = &mut self.totals;
        t.acked += acked;
        t.errors_before += answers.errors_before;
        t.errors_after += answers.errors_after;
        t.written_dropped += cut.written_bytes_dropped;
        t.landed += v.landed;
        t.missing += v.missing;
    }

    /// The whole history through `runnel_history::check`, then an append
    /// through every node, read back through every node.
    async fn final_checks(&mut self) -> Findings {
        let mut findings = Findings::default();
        let micros = |t: Instant| t.saturating_duration_since(self.origin).as_micros() as u64;
        let mut history = runnel_history::check::History::default();
        for w in &self.writers {
            for (seq, a) in w.appends.iter().enumerate() {
                history.appends.push(runnel_history::check::AppendOp {
                    stream: w.stream.clone(),
                    writer: w.id,
                    seq: seq as u64,
                    invoked: micros(a.sent),
                    acked: (a.fate == Fate::Acked)
                        .then(|| a.acked.map(micros))
                        .flatten(),
                    end: None,
                });
            }
        }
        let report = runnel_history::check::check(&history, &self.finals);
        println!("history: {}", report.summary());
        findings.extend(report.anomalies.iter().map(|line| history_violation(line)));
        self.probe(&mut findings).await;
        findings
    }

    /// Every node takes an append and serves what every node took.
    async fn probe(&mut self, findings: &mut Findings) {
        let stream = "cluster-power-loss-probe";
        let ids: Vec<u64> = self.nodes.addrs.keys().copied().collect();
        let mut writer = Writer::new(999_999, stream, true);
        let mut ok = client::create(&self.client, &self.nodes.base(1), stream)
            .await
            .is_ok_and(|s| s.is_success());
        for &id in &ids {
            let seq = writer.appends.len() as u64;
            writer.appends.push(super::check::Append {
                sent: Instant::now(),
                acked: None,
                fate: Fate::InDoubt,
            });
            let answer = client::append(&self.client, &self.nodes.base(id), &writer, seq).await;
            ok &= matches!(answer, Ok((status, _)) if status.is_success());
        }
        let deadline = Instant::now() + READ_PATIENCE;
        for &id in &ids {
            let read = read_patiently(&self.client, &self.nodes.base(id), stream, deadline).await;
            let held = read
                .bytes
                .as_deref()
                .map(|b| super::check::parse(b).map(|v| v.len()));
            ok &= matches!(held, Some(Ok(n)) if n == ids.len());
        }
        if !ok {
            findings.violation(
                Kind::Unavailable,
                format!("after the last cycle, not every node took an append to {stream} and served all {}", ids.len()),
            );
        }
    }
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Adding => "while adding",
        Phase::Added => "between add and remove",
        Phase::Removing => "while removing",
    }
}

/// A `runnel_history` anomaly line (`STREAM: RULE: ...`) as a violation of
/// the matching kind.
fn history_violation(line: &str) -> Violation {
    let rule = line.split(": ").nth(1).unwrap_or("");
    let kind = match rule {
        "lost acknowledged append" => Kind::LostAcknowledgedAppend,
        "duplicate" => Kind::DuplicateAppend,
        "foreign append" | "final contents" => Kind::ForeignBytes,
        _ => Kind::ReorderedAppend,
    };
    Violation::new(kind, format!("history: {line}"))
}
