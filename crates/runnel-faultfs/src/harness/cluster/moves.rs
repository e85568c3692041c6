//! Replica moves that involve the faulty node, and the moment of the move
//! at which it loses power.
//!
//! A move of group G from node A to node B is, as `runnel ctl node move`
//! does it: leadership moved off A (`?lead-away=A`), B added (a learner
//! caught up, then a voter: `?add=B&addr=...`), A removed (`?remove=A`),
//! each a `POST /_runnel/cluster/groups/G/members?...` to a node that is
//! not the faulty one (it forwards to the group's leader). The test takes
//! these steps itself so that the power cut strikes at a chosen
//! [`Phase`]; after the power comes back, it finishes the move as an
//! operator would, running `runnel ctl node move` again until it is done.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use reqwest::Client;

use super::nodes::GroupView;
use crate::harness::error::HarnessError;

/// One replica move: `group`'s replica on `from` goes to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    pub group: u32,
    pub from: u64,
    pub to: u64,
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "group {} from node {} to node {}",
            self.group, self.from, self.to
        )
    }
}

/// When the faulty node loses power.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// While the receiving node is being added (a learner catching up,
    /// then promoted).
    Adding,
    /// Once it is a voter, before the giving node is removed.
    Added,
    /// While the giving node is being removed (and, if it is the faulty
    /// one, dropping its copy).
    Removing,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Adding => "while adding",
            Phase::Added => "between add and remove",
            Phase::Removing => "while removing",
        })
    }
}

/// Picks a data group and a move that involves node `faulty`: off it if
/// it holds the group (to a node that does not), else onto it (from one
/// of the group's voters); and the phase of the cut. `None` when no data
/// group has a settled placement to move from.
pub fn plan(
    layout: &BTreeMap<u32, GroupView>,
    nodes: &[u64],
    faulty: u64,
    rng: &mut StdRng,
) -> Option<(Move, Phase)> {
    let settled: Vec<(u32, &GroupView)> = layout
        .iter()
        .filter(|(g, v)| **g != 0 && !v.voters.is_empty() && v.learners.is_empty())
        .filter(|(_, v)| v.voters.len() < nodes.len())
        .map(|(g, v)| (*g, v))
        .collect();
    let &(group, view) = settled.choose(rng)?;
    let mv = if view.voters.contains(&faulty) {
        let outside: Vec<u64> = nodes
            .iter()
            .copied()
            .filter(|n| !view.voters.contains(n))
            .collect();
        Move {
            group,
            from: faulty,
            to: *outside.choose(rng)?,
        }
    } else {
        Move {
            group,
            from: *view.voters.choose(rng)?,
            to: faulty,
        }
    };
    let phase = [Phase::Adding, Phase::Added, Phase::Removing][rng.gen_range(0..3)];
    Some((mv, phase))
}

/// One membership step, `?query`, sent through `base`; the answer's status
/// and body, or why there was none.
pub async fn step(
    client: &Client,
    base: &str,
    group: u32,
    query: &str,
) -> Result<(u16, String), HarnessError> {
    let url = format!("{base}/_runnel/cluster/groups/{group}/members?{query}");
    let response = client
        .post(&url)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| HarnessError::request(format!("POST {url}"), e))?;
    let status = response.status().as_u16();
    let body = response.text().await.unwrap_or_default();
    Ok((status, body.trim().to_string()))
}

/// How finishing a move went.
#[derive(Debug)]
pub struct Finished {
    /// `runnel ctl node move` runs it took (the last one succeeded).
    pub runs: usize,
    pub seconds: f64,
    /// The group's membership afterwards.
    pub view: GroupView,
}

/// Why a move could not be finished.
#[derive(Debug, thiserror::Error)]
pub enum Unfinished {
    #[error("{runs} runs of `runnel ctl node move` in {seconds:.1}s did not finish it; the last said: {last}")]
    CtlFailed {
        runs: usize,
        seconds: f64,
        last: String,
    },
    #[error(transparent)]
    Harness(#[from] HarnessError),
}

/// How long one `ctl node move` run may take.
const CTL_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `runnel ctl node move` for `mv` through `target` until it exits
/// 0 and the group's membership shows the move done, for at most
/// `within`; reads the membership with `layout`.
pub async fn finish<F, Fut>(
    binary: &Path,
    target: &str,
    mv: Move,
    to_addr: &str,
    within: Duration,
    layout: F,
) -> std::result::Result<Finished, Unfinished>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = BTreeMap<u32, GroupView>>,
{
    let started = Instant::now();
    let mut runs = 0;
    let mut last = String::new();
    while runs == 0 || started.elapsed() < within {
        runs += 1;
        let output = tokio::process::Command::new(binary)
            .args(["ctl", "node", "move"])
            .args(["--group", &mv.group.to_string()])
            .args(["--node-id", &mv.from.to_string()])
            .args(["--to", &mv.to.to_string()])
            .args(["--addr", to_addr, "--target", target])
            .args(["--timeout-secs", &(CTL_TIMEOUT.as_secs() - 5).to_string()])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let output = match tokio::time::timeout(CTL_TIMEOUT, output).await {
            Err(_) => {
                last = format!("no end within {CTL_TIMEOUT:?}");
                continue;
            }
            Ok(Err(source)) => {
                return Err(HarnessError::Ctl {
                    binary: binary.to_path_buf(),
                    source,
                }
                .into())
            }
            Ok(Ok(output)) => output,
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        last = format!(
            "exit {}: {}",
            output.status,
            text.trim().replace('\n', " | ")
        );
        if output.status.success() {
            let view = layout().await.remove(&mv.group).unwrap_or_default();
            if view.voters.contains(&mv.to) && !view.voters.contains(&mv.from) {
                return Ok(Finished {
                    runs,
                    seconds: started.elapsed().as_secs_f64(),
                    view,
                });
            }
            last = format!("ctl said done, but the group is {view:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(Unfinished::CtlFailed {
        runs,
        seconds: started.elapsed().as_secs_f64(),
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn view(voters: &[u64]) -> GroupView {
        GroupView {
            voters: voters.to_vec(),
            learners: vec![],
            leader: voters.first().copied(),
        }
    }

    #[test]
    fn every_move_involves_the_faulty_node() {
        let layout = BTreeMap::from([
            (0, view(&[1, 2, 3])),
            (1, view(&[1, 2])),
            (2, view(&[2, 3])),
            (3, view(&[1, 3])),
        ]);
        for seed in 0..50 {
            let mut rng = StdRng::seed_from_u64(seed);
            let (mv, _) = plan(&layout, &[1, 2, 3], 3, &mut rng).expect("a move");
            assert_ne!(mv.group, 0);
            assert!(mv.from == 3 || mv.to == 3, "{mv}");
            let voters = &layout[&mv.group].voters;
            assert!(
                voters.contains(&mv.from) && !voters.contains(&mv.to),
                "{mv}"
            );
        }
        // A group in the middle of a change is not picked.
        let busy = BTreeMap::from([(1, view(&[1, 2, 3]))]);
        assert!(plan(&busy, &[1, 2, 3], 3, &mut StdRng::seed_from_u64(1)).is_none());
    }
}
