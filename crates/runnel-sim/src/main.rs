//! `runnel-sim`: runs the deterministic simulation's scenarios on seeds.
//!
//! ```text
//! runnel-sim [--scenario NAME|all] (--seed N | --seeds N [--from K]) [--jobs J]
//!            [--trace] [--unsafe-stale-reads]
//! ```
//!
//! Each seed of each scenario runs on a thread of its own (a simulation's
//! randomness and clock origin are its thread's), at most `--jobs` at
//! once. Per seed it prints the scenario, the seed, what was checked,
//! injected and changed, and the checker's summary; anomalies are printed
//! under it. It exits with 1 if any seed found one, or failed (a panic:
//! the cluster never converged, the simulation hung, ...).
//!
//! `--unsafe-stale-reads` arms the engine's stale-read hook for the
//! process (leaders read without confirming their leadership, followers
//! without a read index): the checker must then report stale reads, and
//! the run exit with 1.

use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::mpsc;

use clap::Parser;
use runnel_engine::hooks::{self, Hooks};
use runnel_sim::scenarios::lost_disk;
use runnel_sim::{run_seed, Outcome, Scenario};

#[derive(Parser, Debug)]
#[command(
    name = "runnel-sim",
    about = "Runs the deterministic simulation of a Runnel cluster on seeds.",
    group = clap::ArgGroup::new("which seeds").required(true).args(["seed", "seeds"])
)]
struct Args {
    /// The scenario to run: faults, membership, churn, replicas,
    /// transfer, lost-disk, or all of them.
    #[arg(long, default_value = "all", value_name = "NAME|all")]
    scenario: String,
    /// Runs this one seed (to replay a failure).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Runs this many seeds...
    #[arg(long, value_name = "N")]
    seeds: Option<u64>,
    /// ...from this one on (default: 1).
    #[arg(long, value_name = "K", requires = "seeds", conflicts_with = "seed")]
    from: Option<u64>,
    /// Seeds run at once (default: the machine's cores).
    #[arg(long, value_name = "J")]
    jobs: Option<usize>,
    /// Prints every fault, acknowledgement and step as it happens.
    #[arg(long)]
    trace: bool,
    /// A deliberately broken cluster: reads skip the read barrier and the
    /// read index, so the checker must catch stale reads.
    #[arg(long)]
    unsafe_stale_reads: bool,
}

/// A seed's result: what it found, or why it could not finish.
type Finished = (Scenario, u64, Result<Outcome, String>);

fn main() -> ExitCode {
    let args = Args::parse();
    let scenarios: Vec<Scenario> = if args.scenario == "all" {
        Scenario::ALL.to_vec()
    } else {
        match args.scenario.parse() {
            Ok(scenario) => vec![scenario],
            Err(e) => {
                eprintln!("runnel-sim: --scenario: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let seeds: Vec<u64> = match (args.seed, args.seeds) {
        (Some(seed), _) => vec![seed],
        (None, Some(count)) => {
            let from = args.from.unwrap_or(1);
            (from..from.saturating_add(count)).collect()
        }
        (None, None) => unreachable!("clap requires --seed or --seeds"),
    };
    if args.unsafe_stale_reads {
        hooks::arm(Hooks {
            stale_reads: true,
            ..Hooks::default()
        });
    }
    runnel_sim::sim::print_trace(args.trace);
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);

    let mut queue: VecDeque<(Scenario, u64)> = scenarios
        .iter()
        .flat_map(|s| seeds.iter().map(move |seed| (*s, *seed)))
        .collect();
    let runs = queue.len();
    let (done, finished) = mpsc::channel::<Finished>();
    let mut running = 0;
    let mut failed: Vec<String> = Vec::new();
    let mut held = (0, 0);
    for _ in 0..runs {
        while running < jobs {
            let Some((scenario, seed)) = queue.pop_front() else {
                break;
            };
            spawn(scenario, seed, done.clone());
            running += 1;
        }
        let (scenario, seed, result) = finished.recv().expect("a seed's thread answers");
        running -= 1;
        match result {
            Ok(outcome) => {
                println!("{}", outcome.summary());
                for anomaly in outcome.anomalies() {
                    println!("    {anomaly}");
                }
                if !outcome.ok() {
                    failed.push(format!("{scenario} seed {seed}"));
                }
                if scenario == Scenario::LostDisk {
                    held.1 += 1;
                    held.0 += usize::from(lost_disk::held_its_vote(&outcome));
                }
            }
            Err(panic) => {
                println!("{scenario} seed {seed} failed: {panic}");
                failed.push(format!("{scenario} seed {seed}"));
            }
        }
    }
    if held.1 > 0 {
        println!(
            "lost-disk: the wiped node held its vote while the leader was down in {} of {} seeds",
            held.0, held.1
        );
    }
    if failed.is_empty() {
        println!("{runs} runs, none failed");
        ExitCode::SUCCESS
    } else {
        println!(
            "{runs} runs, {} failed: {}",
            failed.len(),
            failed.join(", ")
        );
        ExitCode::FAILURE
    }
}

/// Runs one seed on a thread of its own, answering on `done` however it
/// ends.
fn spawn(scenario: Scenario, seed: u64, done: mpsc::Sender<Finished>) {
    std::thread::Builder::new()
        .name(format!("{scenario}-{seed}"))
        .stack_size(16 << 20)
        .spawn(move || {
            let result = std::panic::catch_unwind(|| run_seed(scenario, seed))
                .map_err(|panic| panic_text(&*panic));
            let _ = done.send((scenario, seed, result));
        })
        .expect("a thread for the seed");
}

/// A panic's message.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}
