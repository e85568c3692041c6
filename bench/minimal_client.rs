// A minimal HTTP/1.1 client for latency checks, std only and independent
// of `runnel bench`: one keep-alive TCP connection (TCP_NODELAY), a PUT to
// create the stream, then COUNT appends of 256 bytes in a closed loop.
// Prints the p50 and p99 of the appends in milliseconds.
//
//   rustc -O -o minimal-client bench/minimal_client.rs
//   minimal-client PORT STREAM COUNT

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

fn exchange(conn: &mut TcpStream, head: &str, body: &[u8], buf: &mut Vec<u8>) -> u16 {
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(body).unwrap();
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        while buf.len() < end + 4 + length {
            let n = conn.read(&mut chunk).unwrap();
            assert!(n > 0, "the server closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
        return head[9..12].parse().unwrap();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (port, stream, count): (u16, &str, usize) =
        (args[1].parse().unwrap(), &args[2], args[3].parse().unwrap());
    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_nodelay(true).unwrap();
    let mut buf = Vec::new();
    let create = format!(
        "PUT /v1/stream/{stream} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n"
    );
    exchange(&mut conn, &create, b"", &mut buf);
    let body = [b'x'; 256];
    let append = format!(
        "POST /v1/stream/{stream} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut took = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        let status = exchange(&mut conn, &append, &body, &mut buf);
        took.push(started.elapsed());
        assert!(status == 200 || status == 204, "status {status}");
    }
    took.sort();
    let p = |q: f64| took[((q * took.len() as f64) as usize).min(took.len() - 1)].as_secs_f64() * 1000.0;
    println!("{:.3} {:.3}", p(0.5), p(0.99));
}
