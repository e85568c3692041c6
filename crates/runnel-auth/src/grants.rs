//! What a credential may do: operations on stream-name prefixes.
//!
//! A grant's prefix matches only at a `/` boundary: `chat/` grants
//! `chat/room1` and `chat/a/b` but never `chatroom`; `chat` (no slash)
//! grants the stream `chat` itself and everything under `chat/`; the empty
//! prefix grants every stream. `admin` implies every other operation on
//! its prefix, and `admin` on the empty prefix is also what status and
//! metrics need.

use serde::Deserialize;

/// One thing a request does to a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Read,
    Append,
    Create,
    Delete,
    Admin,
    /// Managing subscriptions that watch the streams (`__ds` APIs).
    Subscribe,
}

impl Operation {
    pub const ALL: [Operation; 6] = [
        Operation::Read,
        Operation::Append,
        Operation::Create,
        Operation::Delete,
        Operation::Admin,
        Operation::Subscribe,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Append => "append",
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::Admin => "admin",
            Operation::Subscribe => "subscribe",
        }
    }

    pub fn parse(name: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|op| op.name() == name)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A grant as written in the auth file or a JWT's `grants` claim.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GrantSpec {
    pub prefix: String,
    pub allow: Vec<String>,
}

/// Why a grant's spec is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("unknown operation {0:?} (known: read, append, create, delete, admin, subscribe)")]
    UnknownOperation(String),
    #[error("the grant on {0:?} allows nothing")]
    AllowsNothing(String),
}

/// Operations on the streams under one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    prefix: String,
    ops: u8,
}

impl Grant {
    pub fn new(prefix: impl Into<String>, ops: &[Operation]) -> Grant {
        Grant {
            prefix: prefix.into(),
            ops: ops.iter().fold(0, |bits, op| bits | op.bit()),
        }
    }

    pub fn parse(spec: &GrantSpec) -> Result<Grant, GrantError> {
        let ops = spec
            .allow
            .iter()
            .map(|name| {
                Operation::parse(name).ok_or_else(|| GrantError::UnknownOperation(name.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ops.is_empty() {
            return Err(GrantError::AllowsNothing(spec.prefix.clone()));
        }
        Ok(Grant::new(spec.prefix.clone(), &ops))
    }

    /// Whether the stream `name` lies under this grant's prefix.
    fn covers(&self, name: &str) -> bool {
        let prefix = self.prefix.as_str();
        if prefix.is_empty() {
            return true;
        }
        match name.strip_prefix(prefix) {
            None => false,
            Some(_) if prefix.ends_with('/') => true,
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
        }
    }

    fn allows(&self, op: Operation, name: &str) -> bool {
        self.ops & (op.bit() | Operation::Admin.bit()) != 0 && self.covers(name)
    }

    fn spec(&self) -> GrantSpec {
        GrantSpec {
            prefix: self.prefix.clone(),
            allow: Operation::ALL
                .into_iter()
                .filter(|op| self.ops & op.bit() != 0)
                .map(|op| op.name().to_string())
                .collect(),
        }
    }
}

/// Everything one credential may do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grants(Vec<Grant>);

impl Grants {
    pub fn parse(specs: &[GrantSpec]) -> Result<Grants, GrantError> {
        specs
            .iter()
            .map(Grant::parse)
            .collect::<Result<_, _>>()
            .map(Grants)
    }

    pub fn allows(&self, op: Operation, name: &str) -> bool {
        self.0.iter().any(|grant| grant.allows(op, name))
    }

    /// `admin` on every stream: what status and metrics need.
    pub fn allows_server_admin(&self) -> bool {
        self.0
            .iter()
            .any(|grant| grant.prefix.is_empty() && grant.ops & Operation::Admin.bit() != 0)
    }

    /// `op` on every stream a grant of `prefix` would cover. A grant's
    /// coverage is closed under its boundary rule, so covering the prefix
    /// itself as a name covers everything under it.
    pub fn allows_all_under(&self, op: Operation, prefix: &str) -> bool {
        self.0.iter().any(|grant| {
            grant.ops & (op.bit() | Operation::Admin.bit()) != 0
                && (grant.prefix.is_empty() || (!prefix.is_empty() && grant.covers(prefix)))
        })
    }

    /// Whether these grants allow reading and nothing else.
    pub fn read_only(&self) -> bool {
        self.0
            .iter()
            .all(|grant| grant.ops == Operation::Read.bit())
    }

    pub fn specs(&self) -> Vec<GrantSpec> {
        self.0.iter().map(Grant::spec).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(prefix: &str, ops: &[Operation]) -> Grants {
        Grants(vec![Grant::new(prefix, ops)])
    }

    #[test]
    fn prefixes_match_only_at_a_slash() {
        let chat = grants("chat/", &[Operation::Read]);
        assert!(chat.allows(Operation::Read, "chat/room1"));
        assert!(chat.allows(Operation::Read, "chat/a/b"));
        assert!(!chat.allows(Operation::Read, "chatroom"));
        assert!(!chat.allows(Operation::Read, "chat"));
        assert!(!chat.allows(Operation::Read, "other/chat/x"));

        let bare = grants("chat", &[Operation::Read]);
        assert!(bare.allows(Operation::Read, "chat"));
        assert!(bare.allows(Operation::Read, "chat/x"));
        assert!(!bare.allows(Operation::Read, "chatroom"));
        assert!(!bare.allows(Operation::Read, "cha"));

        let all = grants("", &[Operation::Read]);
        assert!(all.allows(Operation::Read, "anything/at/all"));
    }

    #[test]
    fn operations_are_separate_and_admin_implies_them() {
        let reader = grants("", &[Operation::Read]);
        for op in [
            Operation::Append,
            Operation::Create,
            Operation::Delete,
            Operation::Admin,
        ] {
            assert!(!reader.allows(op, "s"), "{op:?}");
        }
        let admin = grants("team/", &[Operation::Admin]);
        for op in Operation::ALL {
            assert!(admin.allows(op, "team/s"), "{op:?}");
            assert!(!admin.allows(op, "teams"), "{op:?}");
        }
        assert!(!admin.allows_server_admin());
        assert!(grants("", &[Operation::Admin]).allows_server_admin());
        assert!(!grants("", &[Operation::Read, Operation::Append]).allows_server_admin());
    }

    #[test]
    fn grants_parse_with_clear_errors() {
        let spec = |allow: &[&str]| GrantSpec {
            prefix: "p/".into(),
            allow: allow.iter().map(|s| s.to_string()).collect(),
        };
        let parsed = Grants::parse(&[spec(&["read", "append"])]).unwrap();
        assert!(parsed.allows(Operation::Append, "p/x"));
        assert_eq!(parsed.specs(), vec![spec(&["read", "append"])]);
        let err = Grants::parse(&[spec(&["write"])]).unwrap_err();
        assert_eq!(err, GrantError::UnknownOperation("write".into()));
        assert!(err.to_string().contains("\"write\""), "{err}");
        assert!(Grants::parse(&[spec(&[])]).is_err());
    }

    #[test]
    fn a_prefix_is_covered_whole_or_not_at_all() {
        let chat = grants("chat/", &[Operation::Read]);
        assert!(chat.allows_all_under(Operation::Read, "chat/room1"));
        assert!(chat.allows_all_under(Operation::Read, "chat/room1/"));
        assert!(chat.allows_all_under(Operation::Read, "chat/"));
        // `chat` would cover the stream `chat`, which `chat/` does not.
        assert!(!chat.allows_all_under(Operation::Read, "chat"));
        assert!(!chat.allows_all_under(Operation::Read, "cha"));
        assert!(!chat.allows_all_under(Operation::Read, ""));
        assert!(!chat.allows_all_under(Operation::Append, "chat/room1"));
        assert!(grants("", &[Operation::Read]).allows_all_under(Operation::Read, ""));
        assert!(grants("chat", &[Operation::Read]).allows_all_under(Operation::Read, "chat"));
    }

    #[test]
    fn read_only_means_nothing_but_read() {
        assert!(grants("a/", &[Operation::Read]).read_only());
        assert!(!grants("a/", &[Operation::Read, Operation::Append]).read_only());
        assert!(!grants("a/", &[Operation::Admin]).read_only());
    }
}
