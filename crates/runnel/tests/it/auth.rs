//! Access control over HTTP: every route and sub-resource against every
//! kind of caller, on a single node and through each node of a cluster
//! (most requests there are forwarded to another node, which checks the
//! caller again); forks need read on their source; query tokens for
//! `EventSource`; rate limits; reload on SIGHUP; no credential in any
//! log line.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::cluster::Cluster;
use common::Server;
use reqwest::{Client, Method, StatusCode};
use sha2::{Digest, Sha256};

const CLUSTER_KEY: &str = "test-cluster-key-test-cluster-key-0001";
const JWT_SECRET: &str = "test-jwt-secret-test-jwt-secret-00001";

/// The callers of the matrix, with their bearer tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Caller {
    Nobody,
    WrongToken,
    Reader,
    Appender,
    OtherPrefix,
    Admin,
}

const CALLERS: [Caller; 6] = [
    Caller::Nobody,
    Caller::WrongToken,
    Caller::Reader,
    Caller::Appender,
    Caller::OtherPrefix,
    Caller::Admin,
];

impl Caller {
    pub(crate) fn token(self) -> Option<&'static str> {
        match self {
            Caller::Nobody => None,
            Caller::WrongToken => Some("not-a-token-anyone-was-given"),
            Caller::Reader => Some("reader-token-5b1f0a"),
            Caller::Appender => Some("appender-token-77c2e9"),
            Caller::OtherPrefix => Some("other-prefix-token-0d93aa"),
            Caller::Admin => Some("admin-token-e41b27"),
        }
    }
}

fn hex_sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(crate) fn write_auth_file(dir: &Path, extra: &str) -> std::path::PathBuf {
    let token = |name: &str, token: &str, grants: &str| {
        format!(
            "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\ngrants = {grants}\n",
            hex_sha256(token)
        )
    };
    let caller = |caller: Caller, grants: &str| {
        token(&format!("{caller:?}"), caller.token().unwrap(), grants)
    };
    let text = [
        format!("cluster_key = \"{CLUSTER_KEY}\"\n{extra}\n"),
        caller(Caller::Reader, r#"[{ prefix = "t/", allow = ["read"] }]"#),
        caller(
            Caller::Appender,
            r#"[{ prefix = "t/", allow = ["append"] }]"#,
        ),
        caller(
            Caller::OtherPrefix,
            r#"[{ prefix = "elsewhere/", allow = ["admin"] }]"#,
        ),
        caller(Caller::Admin, r#"[{ prefix = "", allow = ["admin"] }]"#),
        // For forks: may create under f/ and read t/, or only create.
        token(
            "forker",
            "forker-token",
            r#"[{ prefix = "f/", allow = ["create"] }, { prefix = "t/", allow = ["read"] }]"#,
        ),
        token(
            "creator",
            "creator-token",
            r#"[{ prefix = "f/", allow = ["create"] }]"#,
        ),
        format!("[jwt]\nhs256_secret = \"{JWT_SECRET}\"\n"),
    ]
    .concat();
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// What a row of the matrix expects of a caller.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// Let through: any answer but 401, 403, 429 or a server error.
    Allowed,
    Status(u16),
}

use Expect::{Allowed, Status};

/// Expectations for the callers in [`CALLERS`] order.
const READ: [Expect; 6] = [
    Status(401),
    Status(401),
    Allowed,
    Status(403),
    Status(403),
    Allowed,
];
const APPEND: [Expect; 6] = [
    Status(401),
    Status(401),
    Status(403),
    Allowed,
    Status(403),
    Allowed,
];
const ADMIN_ONLY: [Expect; 6] = [
    Status(401),
    Status(401),
    Status(403),
    Status(403),
    Status(403),
    Allowed,
];
const OPEN: [Expect; 6] = [Allowed; 6];
const NODES_ONLY: [Expect; 6] = [Status(403); 6];

struct Row {
    what: &'static str,
    method: Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<reqwest::Body>,
    expect: [Expect; 6],
}

fn row(what: &'static str, method: Method, path: String, expect: [Expect; 6]) -> Row {
    Row {
        what,
        method,
        path,
        headers: Vec::new(),
        body: None,
        expect,
    }
}

/// Every route and sub-resource, for streams under `t/{run}-...`.
/// `single`: the server is a single node.
fn matrix(run: &str, caller: Caller, single: bool) -> Vec<Row> {
    let s = format!("/v1/stream/t/{run}-s");
    let mine = format!("{run}-{caller:?}");
    let text = || vec![("content-type", "text/plain".to_string())];
    let mut rows = vec![
        Row {
            headers: text(),
            ..row(
                "create",
                Method::PUT,
                format!("/v1/stream/t/{mine}-new"),
                ADMIN_ONLY,
            )
        },
        Row {
            headers: text(),
            body: Some("x".into()),
            ..row("append (direct path)", Method::POST, s.clone(), APPEND)
        },
        Row {
            headers: text(),
            body: Some(reqwest::Body::wrap_stream(futures::stream::iter([Ok::<
                _,
                std::io::Error,
            >(
                "chunked",
            )]))),
            ..row("append (chunked, hyper)", Method::POST, s.clone(), APPEND)
        },
        row("catch-up read", Method::GET, format!("{s}?offset=-1"), READ),
        row("head", Method::HEAD, s.clone(), READ),
        row(
            "long-poll",
            Method::GET,
            format!("{s}?offset=-1&live=long-poll"),
            READ,
        ),
        row("sse", Method::GET, format!("{s}?offset=-1&live=sse"), READ),
        row("bootstrap", Method::GET, format!("{s}/$bootstrap"), READ),
        row("snapshot read", Method::GET, format!("{s}/$snapshot"), READ),
        Row {
            headers: text(),
            body: Some("snap".into()),
            ..row(
                "snapshot write",
                Method::PUT,
                format!("{s}/$snapshot/0000000000000000_0000000000000001"),
                APPEND,
            )
        },
        row(
            "snapshot delete",
            Method::DELETE,
            format!("{s}/$snapshot/0000000000000000_0000000000000001"),
            ADMIN_ONLY,
        ),
        row(
            "retention",
            Method::PUT,
            format!("{s}/$retention/0000000000000000_0000000000000000"),
            ADMIN_ONLY,
        ),
        Row {
            headers: vec![
                ("content-type", "text/plain".to_string()),
                ("stream-forked-from", format!("/v1/stream/t/{run}-s")),
            ],
            ..row(
                "fork",
                Method::PUT,
                format!("/v1/stream/t/{mine}-fork"),
                ADMIN_ONLY,
            )
        },
        Row {
            headers: vec![("runnel-pin-token", "t1".to_string())],
            ..row("$pin", Method::POST, format!("{s}/$pin"), NODES_ONLY)
        },
        row(
            "delete",
            Method::DELETE,
            format!("/v1/stream/t/{run}-doomed-{caller:?}"),
            ADMIN_ONLY,
        ),
        row("status", Method::GET, "/_runnel/status".into(), ADMIN_ONLY),
        row("metrics", Method::GET, "/metrics".into(), ADMIN_ONLY),
        row("health", Method::GET, "/health".into(), OPEN),
        row("ready", Method::GET, "/ready".into(), OPEN),
        row(
            "read token",
            Method::POST,
            "/_runnel/read-token?prefix=t/".into(),
            READ,
        ),
    ];
    // A forged "forwarded by a node" header changes nothing. (A cluster
    // node that does not lead the group answers such a request 503, to
    // stop forwarding loops: it is checked on a single node.)
    if single {
        rows.push(Row {
            headers: vec![("runnel-forwarded-by", "1".to_string())],
            ..row(
                "forged forward",
                Method::GET,
                format!("{s}?offset=-1"),
                READ,
            )
        });
    }
    rows
}

/// Sends `row` as `token`'s holder; the status, or why none came.
async fn send(
    client: &Client,
    base: &str,
    row: Row,
    token: Option<&str>,
) -> Result<StatusCode, String> {
    let mut request = client
        .request(row.method, format!("{base}{}", row.path))
        .timeout(Duration::from_secs(10));
    for (name, value) in row.headers {
        request = request.header(name, value);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = row.body {
        request = request.body(body);
    }
    // Live reads answer their status at once; the body is not waited for.
    let response = request
        .send()
        .await
        .map_err(|e| format!("no answer: {e:?}"))?;
    if base.starts_with("https") && response.version() != reqwest::Version::HTTP_2 {
        return Err(format!(
            "answered over {:?}, not HTTP/2",
            response.version()
        ));
    }
    Ok(response.status())
}

/// Creates what the matrix reads and deletes, as admin.
async fn prepare(client: &Client, base: &str, run: &str) {
    let admin = Caller::Admin.token().unwrap();
    let put = |name: String| {
        client
            .put(format!("{base}/v1/stream/t/{name}"))
            .bearer_auth(admin)
            .header("content-type", "text/plain")
            .body("hello")
            .send()
    };
    assert_eq!(put(format!("{run}-s")).await.unwrap().status(), 201);
    for caller in CALLERS {
        assert_eq!(
            put(format!("{run}-doomed-{caller:?}"))
                .await
                .unwrap()
                .status(),
            201
        );
    }
}

/// Runs the whole matrix against `base`; returns the failures.
async fn run_matrix(client: &Client, base: &str, run: &str, single: bool) -> Vec<String> {
    prepare(client, base, run).await;
    let mut failures = Vec::new();
    for (n, caller) in CALLERS.into_iter().enumerate() {
        for row in matrix(run, caller, single) {
            let (what, expect) = (row.what, row.expect[n]);
            let got = match send(client, base, row, caller.token()).await {
                Ok(got) => got,
                Err(why) => {
                    failures.push(format!("{base} {what} as {caller:?}: {why}"));
                    continue;
                }
            };
            let ok = match expect {
                Status(code) => got.as_u16() == code,
                Allowed => ![401, 403, 429].contains(&got.as_u16()) && !got.is_server_error(),
            };
            if !ok {
                failures.push(format!(
                    "{base} {what} as {caller:?}: {got}, expected {expect:?}"
                ));
            }
        }
    }
    failures
}

/// Forks need read on the source; query tokens work for GET only.
async fn forks_and_query_tokens(client: &Client, base: &str, run: &str) {
    let fork = |token: &'static str, name: &str| {
        client
            .put(format!("{base}/v1/stream/f/{run}-{name}"))
            .bearer_auth(token)
            .header("content-type", "text/plain")
            .header("stream-forked-from", format!("/v1/stream/t/{run}-s"))
            .send()
    };
    assert_eq!(fork("creator-token", "a").await.unwrap().status(), 403);
    assert_eq!(fork("forker-token", "b").await.unwrap().status(), 201);

    let minted = client
        .post(format!("{base}/_runnel/read-token?prefix=t/&ttl_secs=60"))
        .bearer_auth(Caller::Reader.token().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(minted.status(), 200);
    let minted: serde_json::Value = serde_json::from_slice(&minted.bytes().await.unwrap()).unwrap();
    let token = minted["token"].as_str().unwrap();
    let url = |name: &str| format!("{base}/v1/stream/{name}?offset=-1&access_token={token}");
    let r = client.get(url(&format!("t/{run}-s"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().starts_with("hello"));
    let sse = client
        .get(format!("{}&live=sse", url(&format!("t/{run}-s"))))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200, "EventSource with a query token");
    drop(sse);
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(
        status(client.get(url("elsewhere/x")).send().await.unwrap()),
        403
    );
    assert_eq!(
        status(
            client
                .post(url(&format!("t/{run}-s")))
                .body("x")
                .send()
                .await
                .unwrap()
        ),
        401,
        "query tokens are for GET only"
    );
    // A long-lived file token is refused in the query string.
    let file_token = format!(
        "{base}/v1/stream/t/{run}-s?offset=-1&access_token={}",
        Caller::Reader.token().unwrap()
    );
    assert_eq!(status(client.get(file_token).send().await.unwrap()), 401);
    let r = client
        .get(format!("{base}/v1/stream/t/{run}-s?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer realm=\"runnel\"");
}

/// No token, and no minted JWT, appears in `logs`.
fn assert_no_credentials_in(logs: &str) {
    let mut secrets: Vec<&str> = CALLERS.iter().filter_map(|c| c.token()).collect();
    secrets.extend(["forker-token", "creator-token", CLUSTER_KEY, JWT_SECRET]);
    for secret in secrets {
        assert!(!logs.contains(secret), "a log line holds {secret:?}");
    }
    // Minted tokens are JWTs: their header is the same base64 every time.
    assert!(
        !logs.contains("eyJhbGciOiJIUzI1NiIs"),
        "a log line holds a JWT"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let auth = write_auth_file(dir.path(), "");
    let log = dir.path().join("server.log");
    let server = Server::start_logging(
        &dir.path().join("data"),
        &["--auth-file", auth.to_str().unwrap()],
        &[("RUNNEL_LOG", "debug")],
        Some(&log),
    )
    .await;
    let client = Client::new();
    let failures = run_matrix(&client, &server.base, "one", true).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    forks_and_query_tokens(&client, &server.base, "one").await;
    // Refusals are counted; none here was over a rate limit.
    let metrics = client
        .get(format!("{}/metrics", server.base))
        .bearer_auth(Caller::Admin.token().unwrap())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused = |reason: &str| -> f64 {
        let key = format!("runnel_auth_refusals_total{{reason=\"{reason}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&key)?.parse().ok())
            .unwrap_or_else(|| panic!("no {key}"))
    };
    assert!(refused("unauthenticated") > 10.0 && refused("forbidden") > 10.0);
    assert_eq!(refused("rate_limited"), 0.0);
    drop(server);
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(
        logs.contains("DEBUG"),
        "the server logged at debug level: {logs}"
    );
    assert_no_credentials_in(&logs);
}

/// Over HTTP/2 (TLS, ALPN), every refusal arrives as its status: a
/// request refused before its body is read has the body drained, so the
/// stream ends cleanly instead of being reset under the client. Rounds in
/// a loop, since the reset raced the client's body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_over_http2_delivers_every_refusal() {
    const ROUNDS: usize = 8;
    let ca = common::test_ca(1);
    let dir = tempfile::tempdir().unwrap();
    let auth = write_auth_file(dir.path(), "");
    let file = |name: &str| ca.path().join(name).to_str().unwrap().to_string();
    let flags = [
        "--auth-file".to_string(),
        auth.to_str().unwrap().to_string(),
        "--tls-cert".to_string(),
        file("server.pem"),
        "--tls-key".to_string(),
        file("server.key"),
    ];
    let server =
        Server::start_tls(&dir.path().join("data"), &flags, &ca.path().join("ca.pem")).await;
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        // A new connection per round, as a browser tab would make.
        let client = common::https_client(&ca.path().join("ca.pem"), false);
        let run = format!("h2-{round}");
        failures.extend(run_matrix(&client, &server.base, &run, true).await);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // hyper's client takes a stream reset after a whole answer in its
    // stride; curl reports it as a stream error instead of the answer, as
    // some browsers' fetch does. So the refusals with a body are sent with
    // curl too, again and again: each must end with its status.
    let url = server.stream_url("t/h2-0-s");
    let big = dir.path().join("big-body");
    std::fs::write(&big, vec![b'x'; 200 << 10]).unwrap();
    let refusals: [(&str, Option<&str>, &str, u16); 4] = [
        ("POST", None, "hi", 401),
        ("POST", Some("wrong-token"), "hi", 401),
        ("POST", Some(Caller::Reader.token().unwrap()), "hi", 403),
        ("POST", None, "@big", 401),
    ];
    for round in 0..10 {
        for (method, token, body, status) in refusals {
            let mut curl = std::process::Command::new("curl");
            curl.args(["-sS", "--http2", "--cacert"])
                .arg(ca.path().join("ca.pem"))
                .args([
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code} %{http_version}",
                    "-X",
                    method,
                ])
                .args(["-H", "content-type: text/plain"]);
            if let Some(token) = token {
                curl.args(["-H", &format!("authorization: Bearer {token}")]);
            }
            match body.strip_prefix('@') {
                Some(_) => curl.arg("--data-binary").arg(format!("@{}", big.display())),
                None => curl.args(["--data-binary", body]),
            };
            let out = curl.arg(&url).output().expect("curl runs");
            let printed = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && printed == format!("{status} 2"),
                "round {round}, {method} as {token:?} with {body}: curl exited {:?}, printed {printed:?}, said {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_matrix_through_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let auth = write_auth_file(dir.path(), "");
    let cluster = Cluster::start_as(
        &dir.path().join("cluster"),
        3,
        &["--auth-file", auth.to_str().unwrap()],
        Caller::Admin.token(),
    )
    .await;
    let client = Client::new();
    let mut failures = Vec::new();
    let mut forwarded = 0;
    for i in 0..3 {
        let run = format!("n{i}");
        failures.extend(run_matrix(&client, &cluster.base(i), &run, false).await);
        forks_and_query_tokens(&client, &cluster.base(i), &run).await;
        let served_by = client
            .get(format!(
                "{}?offset=-1",
                cluster.stream_url(i, &format!("t/{run}-s"))
            ))
            .bearer_auth(Caller::Reader.token().unwrap())
            .send()
            .await
            .unwrap()
            .headers()["runnel-served-by"]
            .to_str()
            .unwrap()
            .to_string();
        forwarded += usize::from(served_by != (i + 1).to_string());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(forwarded > 0, "some of the matrix went through forwarding");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_answer_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let auth = write_auth_file(
        dir.path(),
        "[rate_limits]\nper_token = { requests_per_sec = 0.01, burst = 4 }\nper_ip = { requests_per_sec = 0.01, burst = 8 }",
    );
    let server = Server::start(
        &dir.path().join("data"),
        &["--auth-file", auth.to_str().unwrap()],
    )
    .await;
    let client = Client::new();
    let url = server.stream_url("t/limited");
    let admin = Caller::Admin.token().unwrap();
    let r = client
        .put(&url)
        .bearer_auth(admin)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // The admin token has 3 requests left, spent on the direct append
    // path; the 4th is refused there too.
    for n in 0..4 {
        let r = client
            .post(&url)
            .bearer_auth(admin)
            .header("content-type", "text/plain")
            .body("x")
            .send()
            .await
            .unwrap();
        if n < 3 {
            assert_eq!(r.status(), 204, "append {n}");
        } else {
            assert_eq!(r.status(), 429);
            let wait: u64 = r.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(wait >= 1, "{wait}");
        }
    }
    // Another token still has its own budget, until the address's (8)
    // runs out: 5 spent above, so 3 more.
    let reader = Caller::Reader.token().unwrap();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = client
            .get(format!("{url}?offset=-1"))
            .bearer_auth(reader)
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    // Probes stay open whatever the limits.
    let r = client
        .get(format!("{}/health", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_auth_file_and_a_bad_one_is_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    let grant = |token: &str| {
        format!(
            "anonymous_grants = []\n[[tokens]]\nsha256 = \"{}\"\ngrants = [{{ prefix = \"\", allow = [\"admin\"] }}]\n",
            hex_sha256(token)
        )
    };
    std::fs::write(&path, grant("first-token")).unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &["--auth-file", path.to_str().unwrap()],
    )
    .await;
    let client = Client::new();
    let status = |token: &'static str| {
        let request = client
            .get(format!("{}/_runnel/status", server.base))
            .bearer_auth(token);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(
        (status("first-token").await, status("second-token").await),
        (200, 401)
    );
    std::fs::write(&path, grant("second-token")).unwrap();
    server.signal(libc::SIGHUP);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status("second-token").await != 200 {
        assert!(std::time::Instant::now() < deadline, "reloaded on SIGHUP");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status("first-token").await, 401);
    std::fs::write(&path, "[[tokens]]\nsha256 = \"not hex\"\n").unwrap();
    server.signal(libc::SIGHUP);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        status("second-token").await,
        200,
        "the old file stays in force"
    );
}
