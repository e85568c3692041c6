//! `runnel stream`: streams from the command line. `ls`, `create`,
//! `append` (arguments or stdin; one JSON message per line for JSON
//! streams), `cat` (catch-up, decoded for the content type), `tail` (live
//! over SSE, resuming after disconnects), `rm` and `info`, against any
//! server (`--target`). Human output by default, JSON with `--json`;
//! errors are one line on stderr with an exit code from [`client::exit`].

mod client;
mod sse;

use std::io::{IsTerminal, Read, Write};

use bytes::Bytes;
use clap::Subcommand;
use http::Method;
use serde_json::{json, Value};

pub use client::CliError;
use client::{encode, header, StreamClient};

#[derive(clap::Args)]
pub struct StreamArgs {
    /// The server's base URL.
    #[arg(
        long,
        global = true,
        env = "RUNNEL_TARGET",
        default_value = "http://127.0.0.1:4437"
    )]
    target: String,
    /// Bearer token (servers with access control).
    #[arg(long, global = true, env = "RUNNEL_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// https:// targets: the CA's PEM file [default: the system's CAs].
    #[arg(long, global = true)]
    ca: Option<std::path::PathBuf>,
    /// Machine-readable output: JSON (one object per line for lists).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: StreamCommand,
}

#[derive(Subcommand)]
enum StreamCommand {
    /// List streams, all or under a prefix.
    Ls { prefix: Option<String> },
    /// Create a stream.
    Create {
        name: String,
        /// e.g. application/json, text/plain [default: the server's,
        /// application/octet-stream].
        #[arg(long)]
        content_type: Option<String>,
        /// Delete the stream after this many seconds without reads or writes.
        #[arg(long)]
        ttl_secs: Option<u64>,
    },
    /// Append the arguments, or stdin: JSON streams take one message per
    /// argument or line; other streams take each argument, or all of
    /// stdin, as one append.
    Append { name: String, messages: Vec<String> },
    /// Print a stream's history from an offset (-1: the start).
    Cat {
        name: String,
        #[arg(long, default_value = "-1", allow_hyphen_values = true)]
        offset: String,
    },
    /// Print what is appended, live, from an offset (now: the tail);
    /// reconnects after disconnects and ends when the stream is closed.
    Tail {
        name: String,
        #[arg(long, default_value = "now", allow_hyphen_values = true)]
        offset: String,
    },
    /// Delete a stream.
    Rm { name: String },
    /// A stream's content type, tail offset, closed state and TTL.
    Info { name: String },
}

pub fn run(args: StreamArgs) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::failed(e.to_string()))?;
    runtime.block_on(async move {
        let client = StreamClient::new(&args.target, args.token, args.ca.as_deref())?;
        let json = args.json;
        match args.command {
            StreamCommand::Ls { prefix } => {
                ls(&client, prefix.as_deref().unwrap_or(""), json).await
            }
            StreamCommand::Create {
                name,
                content_type,
                ttl_secs,
            } => create(&client, &name, content_type.as_deref(), ttl_secs, json).await,
            StreamCommand::Append { name, messages } => {
                append(&client, &name, messages, json).await
            }
            StreamCommand::Cat { name, offset } => cat(&client, &name, &offset).await,
            StreamCommand::Tail { name, offset } => sse::tail(&client, &name, &offset).await,
            StreamCommand::Rm { name } => rm(&client, &name, json).await,
            StreamCommand::Info { name } => info(&client, &name, json).await,
        }
    })
}

fn parse_json(bytes: &[u8], what: &str) -> Result<Value, CliError> {
    serde_json::from_slice(bytes).map_err(|e| CliError::failed(format!("{what}: not JSON: {e}")))
}

fn print(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(|e| CliError::failed(format!("stdout: {e}")))
}

async fn ls(client: &StreamClient, prefix: &str, json: bool) -> Result<(), CliError> {
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/streams?limit=1000&prefix={}", encode(prefix));
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={}", encode(cursor)));
        }
        let (_, _, body) = client
            .exchange(Method::GET, &path, &[], Bytes::new(), "listing streams")
            .await?;
        let page = parse_json(&body, "the listing")?;
        for stream in page["streams"].as_array().into_iter().flatten() {
            if json {
                print(&stream.to_string())?;
                continue;
            }
            let mut line = format!(
                "{}\t{}\t{} B",
                stream["name"].as_str().unwrap_or(""),
                stream["content_type"].as_str().unwrap_or(""),
                stream["size_bytes"]
            );
            if stream["closed"] == true {
                line.push_str("\tclosed");
            }
            if let Some(ttl) = stream["ttl_secs"].as_u64() {
                line.push_str(&format!("\tttl {ttl} s"));
            }
            if let Some(at) = stream["expires_at"].as_str() {
                line.push_str(&format!("\texpires {at}"));
            }
            print(&line)?;
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(()),
        }
    }
}

async fn create(
    client: &StreamClient,
    name: &str,
    content_type: Option<&str>,
    ttl_secs: Option<u64>,
    json: bool,
) -> Result<(), CliError> {
    let ttl = ttl_secs.map(|t| t.to_string());
    let mut headers = Vec::new();
    if let Some(ct) = content_type {
        headers.push(("content-type", ct));
    }
    if let Some(ttl) = &ttl {
        headers.push(("stream-ttl", ttl.as_str()));
    }
    let path = StreamClient::stream_path(name);
    let what = format!("creating {name}");
    let (status, h, _) = client
        .exchange(Method::PUT, &path, &headers, Bytes::new(), &what)
        .await?;
    let created = status == http::StatusCode::CREATED;
    let next_offset = header(&h, "stream-next-offset").unwrap_or("");
    if json {
        print(&json!({"name": name, "created": created, "next_offset": next_offset}).to_string())
    } else if created {
        print(&format!("created {name}"))
    } else {
        print(&format!("{name} exists with the same configuration"))
    }
}

/// The content type of stream `name` (HEAD).
async fn content_type(client: &StreamClient, name: &str) -> Result<String, CliError> {
    let path = StreamClient::stream_path(name);
    let (_, h, _) = client
        .exchange(Method::HEAD, &path, &[], Bytes::new(), name)
        .await?;
    Ok(header(&h, "content-type")
        .unwrap_or("application/octet-stream")
        .to_string())
}

fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

async fn append(
    client: &StreamClient,
    name: &str,
    messages: Vec<String>,
    json: bool,
) -> Result<(), CliError> {
    let content_type = content_type(client, name).await?;
    let stdin = if messages.is_empty() {
        let mut input = Vec::new();
        std::io::stdin()
            .read_to_end(&mut input)
            .map_err(|e| CliError::failed(format!("stdin: {e}")))?;
        Some(input)
    } else {
        None
    };
    let bodies: Vec<Bytes> = if is_json(&content_type) {
        let lines: Vec<String> = match &stdin {
            Some(input) => String::from_utf8_lossy(input)
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect(),
            None => messages,
        };
        let mut parsed = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            let message: Value = serde_json::from_str(line).map_err(|e| CliError {
                code: client::exit::REFUSED,
                message: format!("message {}: not JSON: {e}", i + 1),
            })?;
            parsed.push(message);
        }
        if parsed.is_empty() {
            return Err(CliError {
                code: client::exit::REFUSED,
                message: "nothing to append".into(),
            });
        }
        vec![Bytes::from(Value::Array(parsed).to_string())]
    } else {
        match stdin {
            Some(input) => vec![Bytes::from(input)],
            None => messages.into_iter().map(Bytes::from).collect(),
        }
    };
    let path = StreamClient::stream_path(name);
    let what = format!("appending to {name}");
    let mut next_offset = String::new();
    let count = bodies.len();
    for body in bodies {
        let headers = [("content-type", content_type.as_str())];
        let (_, h, _) = client
            .exchange(Method::POST, &path, &headers, body, &what)
            .await?;
        next_offset = header(&h, "stream-next-offset").unwrap_or("").to_string();
    }
    if json {
        print(&json!({"name": name, "appends": count, "next_offset": next_offset}).to_string())
    } else {
        print(&format!("appended to {name}; next offset {next_offset}"))
    }
}

/// Writes a read's body for the content type: each JSON message on a
/// line of its own, anything else as it is.
fn write_body(out: &mut impl Write, json: bool, body: &[u8]) -> Result<(), CliError> {
    let failed = |e: std::io::Error| CliError::failed(format!("stdout: {e}"));
    if json {
        let messages = parse_json(body, "a read")?;
        for message in messages.as_array().into_iter().flatten() {
            writeln!(out, "{message}").map_err(failed)?;
        }
    } else {
        out.write_all(body).map_err(failed)?;
    }
    out.flush().map_err(failed)
}

async fn cat(client: &StreamClient, name: &str, offset: &str) -> Result<(), CliError> {
    let mut offset = offset.to_string();
    let path = StreamClient::stream_path(name);
    let progress = std::io::stderr().is_terminal();
    let mut read: u64 = 0;
    let mut out = std::io::stdout().lock();
    loop {
        let query = format!("{path}?offset={}", encode(&offset));
        let (_, h, body) = client
            .exchange(Method::GET, &query, &[], Bytes::new(), name)
            .await?;
        let json = is_json(header(&h, "content-type").unwrap_or(""));
        write_body(&mut out, json, &body)?;
        read += body.len() as u64;
        if progress && read >= 1 << 20 {
            eprint!("\r{read} bytes read");
        }
        let next = header(&h, "stream-next-offset").unwrap_or("").to_string();
        let done =
            header(&h, "stream-up-to-date") == Some("true") || next == offset || next.is_empty();
        offset = next;
        if done {
            if progress && read >= 1 << 20 {
                eprintln!();
            }
            return Ok(());
        }
    }
}

async fn rm(client: &StreamClient, name: &str, json: bool) -> Result<(), CliError> {
    let path = StreamClient::stream_path(name);
    let what = format!("deleting {name}");
    client
        .exchange(Method::DELETE, &path, &[], Bytes::new(), &what)
        .await?;
    if json {
        print(&json!({"name": name, "deleted": true}).to_string())
    } else {
        print(&format!("deleted {name}"))
    }
}

async fn info(client: &StreamClient, name: &str, json: bool) -> Result<(), CliError> {
    let path = StreamClient::stream_path(name);
    let (_, h, _) = client
        .exchange(Method::HEAD, &path, &[], Bytes::new(), name)
        .await?;
    let field = |n: &str| header(&h, n).map(str::to_string);
    let info = json!({
        "name": name,
        "content_type": field("content-type"),
        "next_offset": field("stream-next-offset"),
        "closed": field("stream-closed").as_deref() == Some("true"),
        "ttl_secs": field("stream-ttl").and_then(|t| t.parse::<u64>().ok()),
        "expires_at": field("stream-expires-at"),
    });
    if json {
        return print(&info.to_string());
    }
    let mut text = format!(
        "name          {name}\ncontent type  {}\nnext offset   {}\nclosed        {}",
        info["content_type"].as_str().unwrap_or("-"),
        info["next_offset"].as_str().unwrap_or("-"),
        info["closed"]
    );
    if let Some(ttl) = info["ttl_secs"].as_u64() {
        text.push_str(&format!("\nttl           {ttl} s"));
    }
    if let Some(at) = info["expires_at"].as_str() {
        text.push_str(&format!("\nexpires at    {at}"));
    }
    print(&text)
}
