//! Idempotent producers writing through a cluster while its membership
//! changes: each on its own stream, sending each append to the next node
//! in service, and remembering what was acknowledged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A writer's stream and the messages acknowledged on it, in order.
pub type Written = (String, Vec<String>);

pub struct Writers {
    /// Base URLs of the nodes the writers send to.
    pub targets: Arc<Mutex<Vec<String>>>,
    /// Every error answer or failed request, with the node it came from.
    pub errors: Arc<Mutex<Vec<String>>>,
    /// Each writer's stream and the messages acknowledged on it, in order.
    pub streams: Vec<Arc<Mutex<Written>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    /// Creates `count` streams named `{prefix}-{w}` through `targets[0]`
    /// and starts a writer on each.
    pub async fn start(
        client: &reqwest::Client,
        prefix: &str,
        count: usize,
        targets: Vec<String>,
    ) -> Writers {
        let targets = Arc::new(Mutex::new(targets));
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let first = targets.lock().unwrap()[0].clone();
        let mut streams = Vec::new();
        for w in 0..count {
            let name = format!("{prefix}-{w}");
            super::create_text(client, &format!("{first}/v1/stream/{name}"), "").await;
            streams.push(Arc::new(Mutex::new((name, Vec::new()))));
        }
        let tasks = streams
            .iter()
            .enumerate()
            .map(|(w, stream)| {
                tokio::spawn(write(
                    w,
                    Arc::clone(stream),
                    Arc::clone(&targets),
                    Arc::clone(&errors),
                    Arc::clone(&stop),
                    client.clone(),
                ))
            })
            .collect();
        Writers {
            targets,
            errors,
            streams,
            stop,
            tasks,
        }
    }

    /// Sends to `base` too from now on.
    pub fn add_target(&self, base: String) {
        self.targets.lock().unwrap().push(base);
    }

    /// Sends no more to `base`.
    pub fn drop_target(&self, base: &str) {
        self.targets.lock().unwrap().retain(|t| t != base);
    }

    /// Stops the writers; answers each stream and what was acknowledged.
    pub async fn stop(self) -> Vec<Written> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        self.streams
            .iter()
            .map(|s| s.lock().unwrap().clone())
            .collect()
    }
}

async fn write(
    w: usize,
    stream: Arc<Mutex<Written>>,
    targets: Arc<Mutex<Vec<String>>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    client: reqwest::Client,
) {
    let name = stream.lock().unwrap().0.clone();
    let mut seq = 0u64;
    let mut turn = w;
    while !stop.load(Ordering::Relaxed) {
        let base = {
            let targets = targets.lock().unwrap();
            turn += 1;
            targets[turn % targets.len()].clone()
        };
        let message = format!("<{w}:{seq}>");
        let url = format!("{base}/v1/stream/{name}");
        match super::idempotent_append(&client, &url, w, seq, &message).await {
            Ok(()) => {
                stream.lock().unwrap().1.push(message);
                seq += 1;
            }
            Err(e) => {
                errors.lock().unwrap().push(format!("{base}: {e}"));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Asserts that every writer wrote more than a few appends, and that each
/// stream reads back exactly what was acknowledged on it through every
/// one of `nodes`.
pub async fn assert_read_back(
    client: &reqwest::Client,
    cluster: &super::cluster::Cluster,
    nodes: &[usize],
    written: &[Written],
) {
    for (name, acked) in written {
        assert!(acked.len() > 10, "{name} barely wrote");
        eprintln!("{name}: {} appends acknowledged", acked.len());
        for &node in nodes {
            let body = super::read_all(client, &cluster.stream_url(node, name)).await;
            assert_eq!(
                String::from_utf8(body).unwrap(),
                acked.concat(),
                "{name} through node {}",
                node + 1
            );
        }
    }
}

/// Stops `writers` and checks what a test of membership changes under
/// writes ends with: no writer saw an error, every replica of every
/// group converges, and each stream reads back exactly what was
/// acknowledged on it through every one of `nodes`.
pub async fn stop_and_check(
    writers: Writers,
    client: &reqwest::Client,
    cluster: &super::cluster::Cluster,
    nodes: &[usize],
) {
    let errors = writers.errors.clone();
    let written = writers.stop().await;
    assert_eq!(
        *errors.lock().unwrap(),
        Vec::<String>::new(),
        "writers saw errors"
    );
    cluster
        .wait_for_convergence(std::time::Duration::from_secs(30))
        .await;
    assert_read_back(client, cluster, nodes, &written).await;
}
