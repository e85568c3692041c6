//! The decisions of [`Auth::check`], one credential and access at a time.
//! (tests/auth.rs runs the same matrix over HTTP, single node and
//! through a forwarding cluster node.)

use super::*;

const KEY: &str = "cluster-key-cluster-key-cluster-key";
const SECRET: &str = "jwt-secret-jwt-secret-jwt-secret-jwt";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn auth(extra: &str) -> Auth {
    let token = |name: &str, grants: &str| {
        format!(
            "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\ngrants = {grants}\n",
            hex(&sha256(name.as_bytes()))
        )
    };
    let text = format!(
        "cluster_key = \"{KEY}\"\nanonymous_grants = [{{ prefix = \"public/\", allow = [\"read\"] }}]\n{extra}\n{}{}{}[jwt]\nhs256_secret = \"{SECRET}\"\nquery_token_max_ttl_secs = 300\n",
        token("reader", r#"[{ prefix = "chat/", allow = ["read"] }]"#),
        token("writer", r#"[{ prefix = "chat/", allow = ["read", "append", "create"] }]"#),
        token("admin", r#"[{ prefix = "", allow = ["admin"] }]"#),
    );
    Auth::new(Policy::parse(&text).unwrap(), None)
}

fn creds<'a>(method: &'a Method, authorization: Option<&'a str>) -> Credentials<'a> {
    Credentials {
        method: Some(method),
        authorization: authorization.map(str::as_bytes),
        ..Credentials::default()
    }
}

fn stream<'a>(needs: &'a [(Operation, &'a str)]) -> Access<'a> {
    Access::Streams(needs)
}

fn status(result: Result<Arc<Principal>, Refusal>) -> u16 {
    match result {
        Ok(_) => 200,
        Err(Refusal::Unauthenticated(_)) => 401,
        Err(Refusal::Forbidden(_)) => 403,
        Err(Refusal::RateLimited(_)) => 429,
    }
}

#[test]
fn tokens_get_what_they_were_granted_and_nothing_else() {
    let auth = auth("");
    let get = Method::GET;
    let read = [(Operation::Read, "chat/a")];
    let append = [(Operation::Append, "chat/a")];
    let other = [(Operation::Read, "secret/a")];
    let public = [(Operation::Read, "public/a")];
    let cases = [
        (None, &read[..], 401),
        (None, &public[..], 200),
        (Some("Bearer nope"), &read[..], 401),
        (Some("Basic cmVhZGVy"), &read[..], 401),
        (Some("Bearer reader"), &read[..], 200),
        (Some("bearer reader"), &read[..], 200),
        (Some("Bearer reader"), &append[..], 403),
        (Some("Bearer reader"), &other[..], 403),
        (Some("Bearer writer"), &append[..], 200),
        (Some("Bearer writer"), &other[..], 403),
        (Some("Bearer admin"), &other[..], 200),
    ];
    for (authorization, needs, expected) in cases {
        let got = status(auth.check(&creds(&get, authorization), stream(needs)));
        assert_eq!(got, expected, "{authorization:?} {needs:?}");
    }
    assert_eq!(
        status(auth.check(&creds(&get, Some("Bearer writer")), Access::ServerAdmin)),
        403
    );
    assert_eq!(
        status(auth.check(&creds(&get, Some("Bearer admin")), Access::ServerAdmin)),
        200
    );
    assert_eq!(
        status(auth.check(&creds(&get, None), Access::ServerAdmin)),
        401
    );
}

#[test]
fn only_the_cluster_key_makes_a_node_request() {
    let auth = auth("");
    let post = Method::POST;
    let admin = creds(&post, Some("Bearer admin"));
    assert_eq!(status(auth.check(&admin, Access::Node)), 403);
    let node = Credentials {
        cluster_key: Some(KEY.as_bytes()),
        ..creds(&post, None)
    };
    assert_eq!(status(auth.check(&node, Access::Node)), 200);
    // The key gives a forwarded request no grants of its own.
    let read = [(Operation::Read, "chat/a")];
    assert_eq!(status(auth.check(&node, stream(&read))), 401);
    let wrong = Credentials {
        cluster_key: Some(b"not the key"),
        ..creds(&post, Some("Bearer admin"))
    };
    assert_eq!(status(auth.check(&wrong, stream(&read))), 401);
}

#[test]
fn query_tokens_are_short_lived_read_only_jwts_on_get() {
    let auth = auth("");
    let read = [(Operation::Read, "chat/a")];
    let (token, _) = auth
        .mint_read_token("browser", "chat/", Duration::from_secs(60))
        .unwrap();
    let query = format!("offset=-1&live=sse&access_token={token}");
    let get = Method::GET;
    let post = Method::POST;
    let in_query = |method| Credentials {
        query: Some(&query),
        ..creds(method, None)
    };
    assert_eq!(status(auth.check(&in_query(&get), stream(&read))), 200);
    assert_eq!(status(auth.check(&in_query(&post), stream(&read))), 401);
    let append = [(Operation::Append, "chat/a")];
    assert_eq!(status(auth.check(&in_query(&get), stream(&append))), 403);
    // Both places at once, a file token, a long-lived or writing JWT.
    let both = Credentials {
        query: Some(&query),
        ..creds(&get, Some("Bearer reader"))
    };
    assert_eq!(status(auth.check(&both, stream(&read))), 401);
    let file_token = "access_token=reader".to_string();
    let refused = |query: &str| {
        let credentials = Credentials {
            query: Some(query),
            ..creds(&get, None)
        };
        status(auth.check(&credentials, stream(&read)))
    };
    assert_eq!(refused(&file_token), 401);
    let policy = auth.policy();
    let verifier = policy.jwt.as_ref().unwrap();
    let now = unix_now();
    let reader = grants::Grants::parse(&[grants::GrantSpec {
        prefix: "chat/".into(),
        allow: vec!["read".into()],
    }])
    .unwrap();
    let long = verifier.mint("x", &reader, now, now + 3600).unwrap();
    assert_eq!(refused(&format!("access_token={long}")), 401);
    let writer = grants::Grants::parse(&[grants::GrantSpec {
        prefix: "chat/".into(),
        allow: vec!["read".into(), "append".into()],
    }])
    .unwrap();
    let writing = verifier.mint("x", &writer, now, now + 60).unwrap();
    assert_eq!(refused(&format!("access_token={writing}")), 401);
    // The same writing JWT is fine in the header.
    let header = format!("Bearer {writing}");
    assert_eq!(
        status(auth.check(&creds(&post, Some(&header)), stream(&append))),
        200
    );
}

#[test]
fn minting_needs_read_on_the_whole_prefix() {
    let auth = auth("");
    let get = Method::GET;
    let reader = creds(&get, Some("Bearer reader"));
    assert_eq!(
        status(auth.check(&reader, Access::ReadTokenFor("chat/room1"))),
        200
    );
    assert_eq!(status(auth.check(&reader, Access::ReadTokenFor(""))), 403);
    assert_eq!(
        status(auth.check(&reader, Access::ReadTokenFor("chatroom"))),
        403
    );
}

#[test]
fn rate_limits_per_token_and_per_address() {
    let auth = auth(
        "[rate_limits]\nper_token = { requests_per_sec = 0.001, burst = 2 }\nper_ip = { requests_per_sec = 0.001, burst = 3 }",
    );
    let get = Method::GET;
    let read = [(Operation::Read, "chat/a")];
    let from = |ip: u8, authorization| Credentials {
        peer: Some(IpAddr::from([10, 0, 0, ip])),
        ..creds(&get, authorization)
    };
    assert_eq!(
        status(auth.check(&from(1, Some("Bearer reader")), stream(&read))),
        200
    );
    assert_eq!(
        status(auth.check(&from(2, Some("Bearer reader")), stream(&read))),
        200
    );
    // The token's burst is spent, whichever address it comes from.
    assert_eq!(
        status(auth.check(&from(3, Some("Bearer reader")), stream(&read))),
        429
    );
    assert_eq!(
        status(auth.check(&from(3, Some("Bearer writer")), stream(&read))),
        200
    );
    // Address 3 has now made 2 requests, 10.0.0.1 one: its third is its last.
    assert_eq!(
        status(auth.check(&from(3, Some("Bearer admin")), stream(&read))),
        200
    );
    assert_eq!(
        status(auth.check(&from(3, Some("Bearer admin")), stream(&read))),
        429
    );
    // A forward from another node was counted where it arrived.
    let forwarded = Credentials {
        cluster_key: Some(KEY.as_bytes()),
        ..from(3, Some("Bearer reader"))
    };
    assert_eq!(status(auth.check(&forwarded, stream(&read))), 200);
}

#[test]
fn a_bad_reload_keeps_the_policy_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    let grant = |prefix: &str| {
        format!(
            "[[tokens]]\nsha256 = \"{}\"\ngrants = [{{ prefix = \"{prefix}\", allow = [\"read\"] }}]\n",
            hex(&sha256(b"t"))
        )
    };
    std::fs::write(&path, grant("a/")).unwrap();
    let auth = Auth::load(&path).unwrap();
    let get = Method::GET;
    let t = creds(&get, Some("Bearer t"));
    let check = |name: &str| status(auth.check(&t, stream(&[(Operation::Read, name)])));
    assert_eq!((check("a/x"), check("b/x")), (200, 403));
    std::fs::write(&path, grant("b/")).unwrap();
    auth.reload().unwrap();
    assert_eq!((check("a/x"), check("b/x")), (403, 200));
    std::fs::write(&path, "tokens = 7").unwrap();
    assert!(auth.reload().is_err());
    assert_eq!((check("a/x"), check("b/x")), (403, 200));
}

#[test]
fn query_tokens_are_found_among_other_parameters() {
    assert_eq!(
        query_token("offset=-1&access_token=abc&live=sse"),
        Some("abc")
    );
    assert_eq!(query_token("access_token=abc"), Some("abc"));
    assert_eq!(query_token("xaccess_token=abc"), None);
    assert_eq!(query_token("access_tokens=abc"), None);
    assert_eq!(bearer(b"Bearer  abc "), Some("abc"));
    assert_eq!(bearer(b"Bearer"), None);
    assert_eq!(bearer(b"Token abc"), None);
}
