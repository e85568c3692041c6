//! Credentials as a client sends them: an `Authorization` header, a
//! query string with `access_token`, JWTs of any shape (the seeds hold
//! valid ones, signed with the policy's secret, for the fuzzer to mutate).
//! Access control may refuse them; it must never panic, and no input may
//! get a grant the policy (or a token signed with its secret) did not
//! give: the policy grants reads under `chat/` and nothing else, so no
//! input may append, create, delete, administer, act as a node, read
//! outside `chat/`, or mint a read token for a wider prefix. A decision
//! taken twice (the second time from the JWT cache) is the same.
#![no_main]

use std::sync::OnceLock;

use http::Method;
use libfuzzer_sys::fuzz_target;
use runnel_auth::grants::Operation;
use runnel_auth::policy::Policy;
use runnel_auth::{Access, Auth, Credentials};
use runnel_fuzz::seeds::FUZZ_POLICY;

fn auth() -> &'static Auth {
    static AUTH: OnceLock<Auth> = OnceLock::new();
    AUTH.get_or_init(|| Auth::new(Policy::parse(FUZZ_POLICY).expect("parses"), None))
}

/// What no credential of this policy may do.
const NEVER: [(Operation, &str); 7] = [
    (Operation::Subscribe, "chat/x"),
    (Operation::Append, "chat/x"),
    (Operation::Create, "chat/x"),
    (Operation::Delete, "chat/x"),
    (Operation::Admin, "chat/x"),
    (Operation::Read, "other/x"),
    (Operation::Read, "chat"),
];

fuzz_target!(|data: &[u8]| {
    let (header, query) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let query = std::str::from_utf8(query).ok();
    for method in [Method::GET, Method::POST] {
        let credentials = Credentials {
            method: Some(&method),
            authorization: (!header.is_empty()).then_some(header),
            query,
            ..Credentials::default()
        };
        for need in NEVER {
            let refused = auth().check(&credentials, Access::Streams(&[need]));
            assert!(refused.is_err(), "granted {need:?}");
        }
        assert!(auth().check(&credentials, Access::ServerAdmin).is_err());
        assert!(auth().check(&credentials, Access::Node).is_err());
        let read = [(Operation::Read, "chat/x")];
        let first = auth().check(&credentials, Access::Streams(&read));
        let second = auth().check(&credentials, Access::Streams(&read));
        assert_eq!(
            first.is_ok(),
            second.is_ok(),
            "a decision is the same twice"
        );
        if let Ok(principal) = first {
            assert!(principal.grants.read_only());
            assert!(!principal.grants.allows(Operation::Read, "other/x"));
        }
        if let Some(prefix) = query {
            if auth()
                .check(&credentials, Access::ReadTokenFor(prefix))
                .is_ok()
            {
                assert!(prefix.starts_with("chat/"), "a read token for {prefix:?}");
            }
        }
    }
});
