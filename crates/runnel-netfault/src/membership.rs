//! The operator: membership changes made while the nemesis cuts links and
//! crashes nodes. In order: start the node in reserve and add it (`runnel
//! ctl node add`: it joins group 0 and takes its share of the replicas),
//! move one replica by hand (`ctl node move`), transfer a group's
//! leadership (`POST /_runnel/cluster/groups/G/members?lead=N`), and remove
//! a node (`ctl node remove`: its replicas move away, it leaves every
//! group and is retired), so four nodes become three again. While the
//! faults go on after that, more moves and transfers.
//!
//! Each change is tried again, as an operator would, through another
//! member, until it is done or the operator's time is up: a change
//! refused (409: it would cost a group its quorum, say) is counted and
//! tried again later, like one that met no leader or an unreachable
//! node. A newcomer takes client requests once it is added; a removed
//! node stops taking them, and is stopped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use reqwest::Client;

use crate::cluster::{self, NodeState, Shared};

/// The changes the operator makes, in order; then [`Change::Move`] and
/// [`Change::Lead`] in turn while the faults last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Add,
    Move,
    Lead,
    Remove,
}

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::Add => "add",
            Change::Move => "move",
            Change::Lead => "lead",
            Change::Remove => "remove",
        }
    }
}

/// What the operator did.
#[derive(Debug, Default)]
pub struct Counts {
    /// Changes done, in order: their kind and what they did.
    pub done: Vec<(&'static str, String)>,
    /// Attempts refused (409) and attempts that failed otherwise (no
    /// leader, unreachable, timed out), to be tried again.
    pub refused: usize,
    pub failed: usize,
    /// Changes still not done when the operator's time ran out.
    pub unfinished: Vec<String>,
}

impl Counts {
    /// `7 done (add 1, move 1, lead 4, remove 1: node 4 added; ...)`, the
    /// first few listed.
    pub fn summary(&self) -> String {
        const LISTED: usize = 6;
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for (kind, _) in &self.done {
            *kinds.entry(kind).or_default() += 1;
        }
        let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let mut listed: Vec<&str> = self
            .done
            .iter()
            .take(LISTED)
            .map(|(_, w)| w.as_str())
            .collect();
        if self.done.len() > LISTED {
            listed.push("...");
        }
        let mut out = format!(
            "{} done ({}: {}); {} attempts refused and {} failed, each tried again",
            self.done.len(),
            kinds.join(", "),
            listed.join("; "),
            self.refused,
            self.failed
        );
        if !self.unfinished.is_empty() {
            out += &format!("; not finished: {}", self.unfinished.join("; "));
        }
        out
    }
}

pub struct Operator {
    pub cluster: Shared,
    pub client: Client,
    /// The runnel binary (for `ctl`).
    pub binary: PathBuf,
    pub rng: StdRng,
    /// The node in reserve, added first.
    pub newcomer: usize,
    /// Set when the faults end: no new extra changes after it.
    pub faults_over: Arc<AtomicBool>,
    /// Past this, nothing more is tried.
    pub give_up_at: Instant,
    /// The member to remove, once chosen.
    leaving: Option<usize>,
}

/// Pause between attempts at a change.
const AGAIN: Duration = Duration::from_millis(700);
/// One `ctl` run at most.
const CTL_TIMEOUT: Duration = Duration::from_secs(25);

/// The outcome of one attempt.
enum Attempt {
    Done(String),
    /// Nothing to do (every member already holds every group: no replica
    /// can move).
    Skipped,
    Refused(String),
    Failed(String),
}

impl Operator {
    pub fn new(
        cluster: Shared,
        client: Client,
        binary: PathBuf,
        seed: u64,
        newcomer: usize,
        faults_over: Arc<AtomicBool>,
        give_up_at: Instant,
    ) -> Operator {
        Operator {
            cluster,
            client,
            binary,
            rng: StdRng::seed_from_u64(seed ^ 0x6d65_6d62),
            newcomer,
            faults_over,
            give_up_at,
            leaving: None,
        }
    }

    /// Runs the changes; returns what was done.
    pub async fn run(mut self) -> Counts {
        let mut counts = Counts::default();
        // Let the workload start first.
        tokio::time::sleep(Duration::from_millis(self.rng.gen_range(500..2000))).await;
        let mut plan = vec![Change::Add, Change::Move, Change::Lead, Change::Remove];
        let mut extra = [Change::Move, Change::Lead].into_iter().cycle();
        let mut next = 0;
        loop {
            let change = match plan.get(next) {
                Some(&c) => c,
                None if self.faults_over.load(Ordering::Acquire) => break,
                None => {
                    let c = extra.next().expect("a cycle");
                    plan.push(c);
                    c
                }
            };
            if !self.make(change, &mut counts).await {
                counts.unfinished.push(format!("{change:?}"));
                // The removal waits for nothing else; the rest is moot.
                break;
            }
            next += 1;
            tokio::time::sleep(Duration::from_millis(self.rng.gen_range(200..1500))).await;
        }
        counts
    }

    /// Tries `change` until it is done or time is up. A failure is
    /// printed when it says something new.
    async fn make(&mut self, change: Change, counts: &mut Counts) -> bool {
        let mut said = String::new();
        let mut say = |kind: &str, why: String| {
            if why != said {
                println!("  membership: {change:?} {kind}, to be tried again: {why}");
                said = why;
            }
        };
        while Instant::now() < self.give_up_at {
            let attempt = match change {
                Change::Add => self.add().await,
                Change::Move => self.move_one().await,
                Change::Lead => self.lead().await,
                Change::Remove => self.remove().await,
            };
            match attempt {
                Attempt::Done(what) => {
                    println!("  membership: {what}");
                    counts.done.push((change.name(), what));
                    return true;
                }
                Attempt::Skipped => return true,
                Attempt::Refused(why) => {
                    counts.refused += 1;
                    say("refused", why);
                }
                Attempt::Failed(why) => {
                    counts.failed += 1;
                    say("failed", why);
                }
            }
            tokio::time::sleep(AGAIN).await;
        }
        false
    }

    /// A member that runs, other than `not`, to send a change through.
    async fn target(&mut self, not: Option<usize>) -> Option<(usize, String)> {
        let c = self.cluster.lock().await;
        let up: Vec<usize> = c.up().into_iter().filter(|&n| Some(n) != not).collect();
        let node = *up.choose(&mut self.rng)?;
        Some((node, c.base(node)))
    }

    async fn member_bases(&self) -> Vec<String> {
        let c = self.cluster.lock().await;
        c.members().into_iter().map(|n| c.base(n)).collect()
    }

    /// Starts the node in reserve (once) and adds it.
    async fn add(&mut self) -> Attempt {
        let node = self.newcomer;
        let (state, addr) = {
            let c = self.cluster.lock().await;
            (c.state(node), c.addr(node).to_string())
        };
        if state == NodeState::Reserve {
            if let Err(e) = self.cluster.lock().await.spawn(node) {
                return Attempt::Failed(format!("starting node {}: {e}", node + 1));
            }
            let within = Duration::from_secs(30);
            if let Err(e) = cluster::wait_healthy(&self.cluster, node, &self.client, within).await {
                return Attempt::Failed(e.to_string());
            }
        }
        let Some((_, target)) = self.target(Some(node)).await else {
            return Attempt::Failed("no member runs".into());
        };
        let id = (node + 1).to_string();
        let args = ["node", "add", "--node-id", &id, "--addr", &addr];
        match self.ctl(&args, &target).await {
            Attempt::Done(_) => {
                self.cluster.lock().await.joined(node);
                Attempt::Done(format!("node {id} added"))
            }
            other => other,
        }
    }

    /// Moves one data group's replica from one of its voters to a member
    /// that does not hold it.
    async fn move_one(&mut self) -> Attempt {
        let (members, addrs): (Vec<u64>, BTreeMap<u64, String>) = {
            let c = self.cluster.lock().await;
            let members = c.members();
            let addrs = members
                .iter()
                .map(|&n| (n as u64 + 1, c.addr(n).to_string()))
                .collect();
            (members.iter().map(|&n| n as u64 + 1).collect(), addrs)
        };
        let layout = cluster::layout(&self.client, &self.member_bases().await).await;
        let choices: Vec<(u32, u64, u64)> = layout
            .iter()
            .filter(|(g, v)| **g != 0 && v.learners.is_empty() && !v.voters.is_empty())
            .flat_map(|(g, v)| {
                let outside: Vec<u64> = members
                    .iter()
                    .copied()
                    .filter(|m| !v.voters.contains(m))
                    .collect();
                v.voters.iter().flat_map(move |&from| {
                    outside.clone().into_iter().map(move |to| (*g, from, to))
                })
            })
            .collect();
        let settled = layout
            .iter()
            .all(|(_, v)| v.learners.is_empty() && !v.voters.is_empty());
        let Some(&(group, from, to)) = choices.choose(&mut self.rng) else {
            if settled && layout.len() > 1 {
                return Attempt::Skipped;
            }
            return Attempt::Failed(format!("no replica to move in {layout:?}"));
        };
        let Some((_, target)) = self.target(None).await else {
            return Attempt::Failed("no member runs".into());
        };
        let (g, f, t) = (group.to_string(), from.to_string(), to.to_string());
        let args = [
            "node",
            "move",
            "--group",
            &g,
            "--node-id",
            &f,
            "--to",
            &t,
            "--addr",
            &addrs[&to],
        ];
        match self.ctl(&args, &target).await {
            Attempt::Done(_) => Attempt::Done(format!(
                "group {g}'s replica moved from node {f} to node {t}"
            )),
            other => other,
        }
    }

    /// Transfers a data group's leadership to one of its other voters.
    async fn lead(&mut self) -> Attempt {
        let layout = cluster::layout(&self.client, &self.member_bases().await).await;
        let choices: Vec<(u32, u64)> = layout
            .iter()
            .filter(|(g, _)| **g != 0)
            .flat_map(|(g, v)| {
                v.voters
                    .iter()
                    .filter(|&&n| Some(n) != v.leader)
                    .map(move |&n| (*g, n))
            })
            .collect();
        let Some(&(group, node)) = choices.choose(&mut self.rng) else {
            return Attempt::Failed(format!("no leadership to move in {layout:?}"));
        };
        let Some((_, target)) = self.target(None).await else {
            return Attempt::Failed("no member runs".into());
        };
        let url = format!("{target}/_runnel/cluster/groups/{group}/members?lead={node}");
        match self
            .client
            .post(&url)
            .timeout(Duration::from_secs(15))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => {
                Attempt::Done(format!("group {group}'s leadership moved to node {node}"))
            }
            Ok(r) if r.status().as_u16() == 409 => Attempt::Refused(format!(
                "{url}: {}",
                r.text().await.unwrap_or_default().trim()
            )),
            Ok(r) => Attempt::Failed(format!(
                "{url}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default().trim()
            )),
            Err(e) => Attempt::Failed(format!("{url}: {e}")),
        }
    }

    /// Removes one of the members (chosen once, by the seed), then stops it.
    async fn remove(&mut self) -> Attempt {
        let members = self.cluster.lock().await.members();
        if members.len() <= 3 {
            return Attempt::Failed(format!(
                "only {} members: a removal waits for the newcomer",
                members.len()
            ));
        }
        let node = *self
            .leaving
            .get_or_insert_with(|| members[self.rng.gen_range(0..members.len())]);
        let Some((_, target)) = self.target(Some(node)).await else {
            return Attempt::Failed("no other member runs".into());
        };
        let id = (node + 1).to_string();
        match self
            .ctl(&["node", "remove", "--node-id", &id], &target)
            .await
        {
            Attempt::Done(_) => {
                self.cluster.lock().await.removed(node).await;
                Attempt::Done(format!("node {id} removed (and stopped)"))
            }
            other => other,
        }
    }

    /// Runs `runnel ctl ARGS --target TARGET`.
    async fn ctl(&self, args: &[&str], target: &str) -> Attempt {
        let timeout_secs = (CTL_TIMEOUT.as_secs() - 5).to_string();
        let run = tokio::process::Command::new(&self.binary)
            .arg("ctl")
            .args(args)
            .args(["--target", target, "--timeout-secs", &timeout_secs])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let what = format!("ctl {} (through {target})", args.join(" "));
        let output = match tokio::time::timeout(CTL_TIMEOUT, run).await {
            Err(_) => return Attempt::Failed(format!("{what}: no end within {CTL_TIMEOUT:?}")),
            Ok(Err(e)) => return Attempt::Failed(format!("{what}: {e}")),
            Ok(Ok(output)) => output,
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let text = text.trim().replace('\n', " | ");
        let text: String = text.chars().take(400).collect();
        if output.status.success() {
            Attempt::Done(text)
        } else if text.contains("refused (409)") {
            Attempt::Refused(format!("{what}: {text}"))
        } else {
            Attempt::Failed(format!("{what}: {}: {text}", output.status))
        }
    }
}
