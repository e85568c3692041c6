//! A webhook receiver in the test's process: it records every delivery
//! (body, raw bytes, signature header) and answers as the test scripts it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How the receiver answers one delivery.
#[derive(Clone)]
pub enum Reply {
    /// 200 with this JSON body.
    Ok(Value),
    /// This status, no body.
    Fail(u16),
    /// No answer at all (the server's timeout must fire).
    Hang,
}

/// One delivery as the receiver saw it.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub at: Instant,
    pub body: Value,
    pub raw: Vec<u8>,
    pub signature: String,
}

#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    pub script: Arc<Mutex<VecDeque<Reply>>>,
    /// Once the script runs out.
    default: Arc<Mutex<Reply>>,
    seen: Arc<Mutex<Vec<Delivery>>>,
}

impl Receiver {
    pub async fn start(default: Reply) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let receiver = Receiver {
            url,
            script: Arc::default(),
            default: Arc::new(Mutex::new(default)),
            seen: Arc::default(),
        };
        let r = receiver.clone();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                tokio::spawn(r.clone().serve(socket));
            }
        });
        receiver
    }

    async fn serve(self, mut socket: tokio::net::TcpStream) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let (head_end, length) = loop {
            let n = match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                break (end + 4, length);
            }
        };
        while buf.len() < head_end + length {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let signature = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("webhook-signature")
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_default();
        let raw = buf[head_end..head_end + length].to_vec();
        self.seen.lock().unwrap().push(Delivery {
            at: Instant::now(),
            body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
            raw,
            signature,
        });
        let reply = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| self.default.lock().unwrap().clone());
        let answer = match reply {
            Reply::Ok(body) => {
                let body = body.to_string();
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
            }
            Reply::Fail(status) => format!(
                "HTTP/1.1 {status} Failed\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            ),
            Reply::Hang => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                return;
            }
        };
        let _ = socket.write_all(answer.as_bytes()).await;
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits (at most 20 s) until `count` deliveries arrived.
    pub async fn wait_for(&self, count: usize) -> Vec<Delivery> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = self.deliveries();
            if seen.len() >= count {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "{} deliveries arrived, {count} expected",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
