//! Live readers following streams over SSE through a cluster while it
//! changes: each follows one stream, through the next node in service
//! whenever its connection ends (a node stopping ends it), resuming from
//! the last offset a control event gave, and keeps what it received up
//! to that offset. An answer other than 200, or a request that fails, is
//! an error; a connection that ends is not (clients resume).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Readers {
    /// Base URLs of the nodes the readers connect to.
    pub targets: Arc<Mutex<Vec<String>>>,
    /// Every error answer or failed request, with the node it came from.
    pub errors: Arc<Mutex<Vec<String>>>,
    /// Each reader's stream and what it received, up to its last offset.
    received: Vec<Arc<Mutex<(String, String)>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    /// Starts a reader on each of `streams`, from its start.
    pub fn start(client: &reqwest::Client, streams: &[String], targets: Vec<String>) -> Readers {
        let targets = Arc::new(Mutex::new(targets));
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let received: Vec<_> = streams
            .iter()
            .map(|name| Arc::new(Mutex::new((name.clone(), String::new()))))
            .collect();
        let tasks = received
            .iter()
            .enumerate()
            .map(|(r, out)| {
                tokio::spawn(follow(
                    r,
                    Arc::clone(out),
                    Arc::clone(&targets),
                    Arc::clone(&errors),
                    Arc::clone(&stop),
                    client.clone(),
                ))
            })
            .collect();
        Readers {
            targets,
            errors,
            received,
            stop,
            tasks,
        }
    }

    /// Connects to `base` too from now on.
    pub fn add_target(&self, base: String) {
        self.targets.lock().unwrap().push(base);
    }

    /// Connects no more to `base` (a connection open there stays until
    /// it ends).
    pub fn drop_target(&self, base: &str) {
        self.targets.lock().unwrap().retain(|t| t != base);
    }

    /// Waits until each reader received exactly what `written` says was
    /// acknowledged on its stream, then stops them; asserts that no
    /// reader saw an error.
    pub async fn check_and_stop(self, written: &[super::writers::Written]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for out in &self.received {
            loop {
                let (name, got) = out.lock().unwrap().clone();
                let (_, acked) = written
                    .iter()
                    .find(|(n, _)| *n == name)
                    .expect("a reader follows a written stream");
                let want = acked.concat();
                if got == want {
                    eprintln!("{name}: a live reader received all {} bytes", got.len());
                    break;
                }
                assert!(
                    want.starts_with(&got) && Instant::now() < deadline,
                    "{name}: the live reader received {got:?}, not a prefix of {want:?} \
                     (or not all of it in time)"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        assert_eq!(
            *self.errors.lock().unwrap(),
            Vec::<String>::new(),
            "live readers saw errors"
        );
    }
}

async fn follow(
    r: usize,
    out: Arc<Mutex<(String, String)>>,
    targets: Arc<Mutex<Vec<String>>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    client: reqwest::Client,
) {
    let name = out.lock().unwrap().0.clone();
    let mut offset = "-1".to_string();
    let mut turn = r;
    while !stop.load(Ordering::Relaxed) {
        let base = {
            let targets = targets.lock().unwrap();
            turn += 1;
            targets[turn % targets.len()].clone()
        };
        let url = format!("{base}/v1/stream/{name}?offset={offset}&live=sse");
        let mut response = match client.get(&url).send().await {
            Ok(r) if r.status() == 200 => r,
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                errors
                    .lock()
                    .unwrap()
                    .push(format!("{url}: {status} {body}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => {
                errors.lock().unwrap().push(format!("{url}: {e}"));
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Bytes of events not yet complete, and data not yet confirmed by
        // a control event (a connection that ends between the two sends
        // them again from the last offset).
        let (mut buffer, mut pending) = (Vec::new(), String::new());
        while !stop.load(Ordering::Relaxed) {
            let chunk =
                match tokio::time::timeout(Duration::from_millis(200), response.chunk()).await {
                    Err(_) => continue,
                    Ok(Ok(Some(chunk))) => chunk,
                    // The connection ended: resume elsewhere.
                    Ok(Ok(None)) | Ok(Err(_)) => break,
                };
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = buffer.drain(..end + 2).collect();
                let event = String::from_utf8(event).expect("a text stream's events are UTF-8");
                let mut kind = "";
                let mut data = Vec::new();
                for line in event.lines() {
                    if let Some(k) = line.strip_prefix("event:") {
                        kind = k.trim();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push(d);
                    }
                }
                let data = data.join("\n");
                match kind {
                    "data" => pending.push_str(&data),
                    "control" => {
                        let control: serde_json::Value =
                            serde_json::from_str(&data).expect("a control event is JSON");
                        offset = control["streamNextOffset"]
                            .as_str()
                            .expect("a control event names the next offset")
                            .to_string();
                        out.lock().unwrap().1.push_str(&pending);
                        pending.clear();
                    }
                    _ => {}
                }
            }
        }
    }
}
