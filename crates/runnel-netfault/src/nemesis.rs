//! The fault schedule: from one seed, a sequence of faults, each held for
//! a few seconds and then healed, with calm stretches between. The seed
//! fixes the kinds, the nodes and the durations; which node leads a group
//! when a leader is cut off is read from the cluster at that moment.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::net::Fault;

/// One step of the schedule.
#[derive(Clone, Debug)]
pub struct Step {
    pub kind: Kind,
    pub hold: Duration,
    /// Fault-free time after healing.
    pub calm: Duration,
}

/// A fault before it is bound to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Isolate(usize),
    /// Cut the node leading the most groups from its peers.
    CutLeader,
    Bridge {
        middle: usize,
    },
    Loss(u8),
    Slow(usize),
}

impl Kind {
    /// The fault itself, given the node that leads the most groups.
    pub fn bind(self, leader: Option<usize>, nodes: usize) -> Fault {
        match self {
            Kind::Isolate(n) => Fault::Isolate(n),
            Kind::CutLeader => Fault::CutFromPeers(leader.unwrap_or(0) % nodes),
            Kind::Bridge { middle } => Fault::Bridge { middle },
            Kind::Loss(p) => Fault::Loss(p),
            Kind::Slow(node) => Fault::Slow { node, kbit: 512 },
        }
    }
}

/// The schedule for `seed`, long enough to fill `duration`.
pub fn schedule(seed: u64, nodes: usize, duration: Duration) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut total = Duration::ZERO;
    while total < duration {
        let kind = match rng.gen_range(0..6) {
            0 => Kind::Isolate(rng.gen_range(0..nodes)),
            // A leader cut off is the case linearizable reads exist for:
            // twice as likely as the others.
            1 | 2 => Kind::CutLeader,
            3 => Kind::Bridge {
                middle: rng.gen_range(0..nodes),
            },
            4 => Kind::Loss(rng.gen_range(10..=40)),
            _ => Kind::Slow(rng.gen_range(0..nodes)),
        };
        let step = Step {
            kind,
            hold: Duration::from_millis(rng.gen_range(2_000..6_000)),
            calm: Duration::from_millis(rng.gen_range(1_000..3_000)),
        };
        total += step.hold + step.calm;
        steps.push(step);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule_that_fills_the_duration() {
        let a = schedule(7, 3, Duration::from_secs(60));
        let b = schedule(7, 3, Duration::from_secs(60));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let total: Duration = a.iter().map(|s| s.hold + s.calm).sum();
        assert!(total >= Duration::from_secs(60));
        assert_ne!(
            format!("{a:?}"),
            format!("{:?}", schedule(8, 3, Duration::from_secs(60)))
        );
    }

    #[test]
    fn every_kind_of_fault_comes_up() {
        let steps = schedule(1, 3, Duration::from_secs(600));
        let has = |f: fn(&Kind) -> bool| steps.iter().any(|s| f(&s.kind));
        assert!(has(|k| matches!(k, Kind::Isolate(_))));
        assert!(has(|k| matches!(k, Kind::CutLeader)));
        assert!(has(|k| matches!(k, Kind::Bridge { .. })));
        assert!(has(|k| matches!(k, Kind::Loss(_))));
        assert!(has(|k| matches!(k, Kind::Slow(_))));
    }
}
