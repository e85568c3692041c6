//! The fault schedule: from one seed, a sequence of faults, each held for
//! a few seconds and then healed, with calm stretches between; at least
//! one of them a crash. The seed
//! fixes the kinds, the durations and a number per step that picks the
//! node among the members at that moment (the members change while the
//! run adds and removes nodes); which node leads the most groups, for a
//! leader cut off, is read from the cluster then.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::net::Fault;

/// One step of the schedule.
#[derive(Clone, Debug)]
pub struct Step {
    pub kind: Kind,
    /// Picks the node(s) among the members when the step comes.
    pub pick: u32,
    pub hold: Duration,
    /// Fault-free time after healing.
    pub calm: Duration,
}

/// A fault before it is bound to nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Isolate,
    /// Cut the node leading the most groups from its peers.
    CutLeader,
    Bridge,
    Loss(u8),
    Slow,
    /// SIGKILL a node, and start it again when the hold ends.
    Crash,
}

impl Kind {
    /// The name a report counts it under.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Isolate => "isolate",
            Kind::CutLeader => "cut-leader",
            Kind::Bridge => "bridge",
            Kind::Loss(_) => "loss",
            Kind::Slow => "slow",
            Kind::Crash => "crash",
        }
    }
}

/// A step bound to nodes: a network fault, or a crash of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Net(Fault),
    /// The 0-based node to kill and restart.
    Crash(usize),
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Net(fault) => fault.fmt(f),
            Action::Crash(node) => write!(f, "node {} crashed (SIGKILL)", node + 1),
        }
    }
}

impl Step {
    /// The action, given the members (0-based, at least one) and the node
    /// that leads the most groups.
    pub fn bind(&self, members: &[usize], leader: Option<usize>) -> Action {
        let pick = self.pick as usize;
        let one = members[pick % members.len()];
        let others = |node: usize| -> Vec<usize> {
            members.iter().copied().filter(|&n| n != node).collect()
        };
        match self.kind {
            Kind::Isolate => Action::Net(Fault::Isolate(one)),
            Kind::CutLeader => {
                let node = leader.filter(|l| members.contains(l)).unwrap_or(one);
                Action::Net(Fault::CutFromPeers {
                    node,
                    peers: others(node),
                })
            }
            Kind::Bridge => {
                let mut rest = others(one);
                // The others split in two (rotated by the pick), each half
                // reaching the middle but not the other half.
                let turn = pick % rest.len().max(1);
                rest.rotate_left(turn);
                let right = rest.split_off(rest.len() / 2);
                Action::Net(Fault::Bridge {
                    middle: one,
                    left: rest,
                    right,
                })
            }
            Kind::Loss(percent) => Action::Net(Fault::Loss {
                percent,
                nodes: members.to_vec(),
            }),
            Kind::Slow => Action::Net(Fault::Slow {
                node: one,
                kbit: 512,
            }),
            Kind::Crash => Action::Crash(one),
        }
    }
}

/// The schedule for `seed`, long enough to fill `duration` (none for a
/// zero duration).
pub fn schedule(seed: u64, duration: Duration) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut total = Duration::ZERO;
    while total < duration {
        let kind = match rng.gen_range(0..7) {
            0 => Kind::Isolate,
            // A leader cut off is the case linearizable reads exist for:
            // twice as likely as the others.
            1 | 2 => Kind::CutLeader,
            3 => Kind::Bridge,
            4 => Kind::Loss(rng.gen_range(10..=40)),
            5 => Kind::Slow,
            _ => Kind::Crash,
        };
        let step = Step {
            kind,
            pick: rng.gen(),
            hold: Duration::from_millis(rng.gen_range(2_000..6_000)),
            calm: Duration::from_millis(rng.gen_range(1_000..3_000)),
        };
        total += step.hold + step.calm;
        steps.push(step);
    }
    // Every run crashes a node at least once (when it has a second step
    // to put the crash in: the first is left as drawn).
    if steps.len() >= 2 && !steps.iter().any(|s| s.kind == Kind::Crash) {
        let at = rng.gen_range(1..steps.len());
        steps[at].kind = Kind::Crash;
    }
    steps
}

/// Faults applied, by kind.
#[derive(Debug, Default)]
pub struct Applied {
    pub by_kind: BTreeMap<&'static str, usize>,
}

impl Applied {
    pub fn count(&mut self, kind: Kind) {
        *self.by_kind.entry(kind.name()).or_default() += 1;
    }

    pub fn total(&self) -> usize {
        self.by_kind.values().sum()
    }

    /// `7 (isolate 1, cut-leader 3, ...)`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        format!("{} ({})", self.total(), parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule_that_fills_the_duration() {
        let a = schedule(7, Duration::from_secs(60));
        let b = schedule(7, Duration::from_secs(60));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let total: Duration = a.iter().map(|s| s.hold + s.calm).sum();
        assert!(total >= Duration::from_secs(60));
        assert_ne!(
            format!("{a:?}"),
            format!("{:?}", schedule(8, Duration::from_secs(60)))
        );
        assert!(schedule(7, Duration::ZERO).is_empty());
        for seed in 0..50 {
            let steps = schedule(seed, Duration::from_secs(30));
            assert!(steps.iter().any(|s| s.kind == Kind::Crash), "seed {seed}");
        }
    }

    #[test]
    fn every_kind_of_fault_comes_up() {
        let steps = schedule(1, Duration::from_secs(600));
        let has = |f: fn(&Kind) -> bool| steps.iter().any(|s| f(&s.kind));
        assert!(has(|k| matches!(k, Kind::Isolate)));
        assert!(has(|k| matches!(k, Kind::CutLeader)));
        assert!(has(|k| matches!(k, Kind::Bridge)));
        assert!(has(|k| matches!(k, Kind::Loss(_))));
        assert!(has(|k| matches!(k, Kind::Slow)));
        assert!(has(|k| matches!(k, Kind::Crash)));
    }

    #[test]
    fn steps_bind_to_the_members_of_the_moment() {
        for pick in 0..20 {
            for members in [vec![0, 1, 2], vec![0, 1, 2, 3], vec![1, 2, 3]] {
                let step = |kind| Step {
                    kind,
                    pick,
                    hold: Duration::ZERO,
                    calm: Duration::ZERO,
                };
                match step(Kind::Bridge).bind(&members, None) {
                    Action::Net(Fault::Bridge {
                        middle,
                        left,
                        right,
                    }) => {
                        assert!(!left.is_empty() && !right.is_empty());
                        let mut all = [vec![middle], left, right].concat();
                        all.sort();
                        assert_eq!(all, members);
                    }
                    other => panic!("{other:?}"),
                }
                match step(Kind::CutLeader).bind(&members, Some(0)) {
                    Action::Net(Fault::CutFromPeers { node, peers }) => {
                        assert!(members.contains(&node));
                        assert!(!peers.contains(&node));
                        assert_eq!(peers.len(), members.len() - 1);
                    }
                    other => panic!("{other:?}"),
                }
                match step(Kind::Crash).bind(&members, None) {
                    Action::Crash(node) => assert!(members.contains(&node)),
                    other => panic!("{other:?}"),
                }
            }
        }
    }
}
