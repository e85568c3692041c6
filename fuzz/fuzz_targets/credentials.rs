//! Credentials as a client sends them: an `Authorization` header, a
//! query string with `access_token`, JWTs of any shape. Access control
//! may refuse them; it must never panic, and a refusal must never be
//! taken for a grant.
#![no_main]

use std::sync::OnceLock;

use http::Method;
use libfuzzer_sys::fuzz_target;
use runnel_server::auth::policy::Policy;
use runnel_server::auth::{Access, Auth, Credentials, Operation};

fn auth() -> &'static Auth {
    static AUTH: OnceLock<Auth> = OnceLock::new();
    AUTH.get_or_init(|| {
        // The token "t" may read chat/; HS256 JWTs under this secret.
        let policy = Policy::parse(
            "[[tokens]]\n\
             sha256 = \"e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8\"\n\
             grants = [{ prefix = \"chat/\", allow = [\"read\"] }]\n\
             [jwt]\n\
             hs256_secret = \"fuzzing-secret-fuzzing-secret-0123\"\n",
        )
        .expect("the fuzz policy parses");
        Auth::new(policy, None)
    })
}

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
        let needs = [(Operation::Append, "chat/x")];
        // Nothing this policy holds grants an append: no input may pass.
        assert!(auth().check(&credentials, Access::Streams(&needs)).is_err());
        let _ = auth().check(
            &credentials,
            Access::Streams(&[(Operation::Read, "chat/x")]),
        );
        if let Some(prefix) = query {
            let _ = auth().check(&credentials, Access::ReadTokenFor(prefix));
        }
    }
});
