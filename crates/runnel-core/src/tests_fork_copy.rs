//! Forks across groups: a fork made from a pinned copy reads like a fork
//! in its source's own state, and pins hold and release the source.

use crate::command::*;
use crate::error::CoreError;
use crate::fork_copy::{ForkMaterial, Inherited, RemotePin};
use crate::offset::{Offset, ReadFrom};
use crate::state::{Applied, StreamsState};
use crate::tests::{append, create, fork, json_append, Harness, T0};

/// Forks `name` from `source` (in `src`) into `dst` the way the server
/// does across groups: pin, copy, create with the copy.
fn fork_across(
    src: &mut Harness,
    dst: &mut Harness,
    name: &str,
    source: &str,
    offset: Option<u64>,
    sub_offset: u64,
    token: &str,
) -> Result<Applied, CoreError> {
    let pinned = src.run(Command::Pin {
        name: source.into(),
        token: token.into(),
        offset,
        sub_offset,
    })?;
    let Applied::Pinned { point } = pinned else {
        panic!("a pin answers Pinned, not {pinned:?}");
    };
    let (material, data) = src.fork_material(source, point)?;
    // The copy travels between nodes in its wire form.
    let wire = material.encode(&data);
    let (material, data) = ForkMaterial::decode(&wire).unwrap();
    let Command::Create(mut c) = fork(name, source, offset, sub_offset) else {
        unreachable!()
    };
    c.body.data = data.to_vec();
    c.inherit = Some(Inherited {
        token: token.into(),
        material,
    });
    dst.run(Command::Create(c))
}

/// Every readable start position of `name` with what a read from there
/// returns, and whether it is a message boundary.
fn reads_from_everywhere(h: &Harness, name: &str) -> Vec<(u64, Result<Vec<u8>, CoreError>)> {
    let tail = h.state.head(name, T0).unwrap().next_offset.position();
    (0..=tail)
        .map(|p| {
            let read = h
                .read_at(name, ReadFrom::At(Offset(p)), u64::MAX)
                .map(|(bytes, _)| bytes);
            (p, read)
        })
        .collect()
}

#[test]
fn a_copied_fork_reads_like_a_local_fork_at_every_point() {
    let mut src = Harness::default();
    src.run(create("bin", "text/plain")).unwrap();
    for piece in [&b"abcd"[..], b"ef", b"ghijk"] {
        src.run(Command::Append(append("bin", piece))).unwrap();
    }
    src.run(create("j", "application/json")).unwrap();
    src.run(json_append("j", r#"[{"a":1},{"b":2},{"c":3}]"#))
        .unwrap();
    src.run(json_append("j", r#"{"d":4}"#)).unwrap();
    // A chain inside the source group: the copy walks it.
    src.run(fork("j-mid", "j", None, 0)).unwrap();
    src.run(json_append("j-mid", r#"[{"e":5},{"f":6}]"#))
        .unwrap();

    let mut tried = 0;
    for source in ["bin", "j", "j-mid"] {
        let tail = src.state.head(source, T0).unwrap().next_offset.position();
        for offset in 0..=tail {
            for sub_offset in 0..3 {
                let mut dst = Harness::default();
                let token = format!("t-{source}-{offset}-{sub_offset}");
                let copied = fork_across(
                    &mut src,
                    &mut dst,
                    "f",
                    source,
                    Some(offset),
                    sub_offset,
                    &token,
                );
                let local = src.run(fork("local", source, Some(offset), sub_offset));
                match (&copied, &local) {
                    (Err(a), Err(b)) => {
                        assert_eq!(a, b, "{source}@{offset}+{sub_offset}");
                        continue;
                    }
                    (Ok(_), Ok(_)) => {}
                    _ => panic!("{source}@{offset}+{sub_offset}: {copied:?} vs {local:?}"),
                }
                tried += 1;
                assert_eq!(
                    reads_from_everywhere(&dst, "f"),
                    reads_from_everywhere(&src, "local"),
                    "{source}@{offset}+{sub_offset}"
                );
                assert_eq!(
                    dst.state.head("f", T0).unwrap().content_type,
                    src.state.head("local", T0).unwrap().content_type
                );
                // Both take later appends at the same offset.
                let more = |name: &str| match source {
                    "bin" => Command::Append(append(name, b"+")),
                    _ => json_append(name, r#"{"z":0}"#),
                };
                // The two streams differ in their incarnation only.
                let without_incarnation = |applied: Result<Applied, CoreError>| match applied {
                    Ok(Applied::Appended {
                        next_offset,
                        closed,
                        producer,
                        duplicate,
                        ..
                    }) => (next_offset, closed, producer, duplicate),
                    other => panic!("{source}@{offset}+{sub_offset}: {other:?}"),
                };
                assert_eq!(
                    without_incarnation(dst.run(more("f"))),
                    without_incarnation(src.run(more("local")))
                );
                assert_eq!(dst.read_all("f"), src.read_all("local"));
                src.run(Command::Delete {
                    name: "local".into(),
                })
                .unwrap();
                src.run(Command::Unpin {
                    name: source.into(),
                    token,
                })
                .unwrap();
            }
        }
    }
    assert!(tried > 30, "only {tried} fork points were valid");
    // Every pin was released: deleting the sources removes them for good.
    for source in ["j-mid", "j", "bin"] {
        src.run(Command::Delete {
            name: source.into(),
        })
        .unwrap();
        assert_eq!(src.state.head(source, T0), Err(CoreError::NotFound));
    }
}

#[test]
fn a_pin_holds_a_deleted_source_until_its_fork_goes() {
    let mut src = Harness::default();
    let mut dst = Harness::default();
    src.run(create("s", "text/plain")).unwrap();
    src.run(Command::Append(append("s", b"hello"))).unwrap();
    fork_across(&mut src, &mut dst, "f", "s", None, 0, "tok").unwrap();

    // The source is only soft-deleted while pinned: 410, name held.
    src.run(Command::Delete { name: "s".into() }).unwrap();
    assert_eq!(src.state.head("s", T0), Err(CoreError::Gone));
    assert_eq!(
        src.run(create("s", "text/plain")),
        Err(CoreError::NameHeldBySoftDeleted)
    );
    assert_eq!(
        fork_across(&mut src, &mut dst, "g", "s", None, 0, "tok2"),
        Err(CoreError::ForkSourceGone)
    );
    // The copy does not need the source.
    assert_eq!(dst.read_all("f"), b"hello");

    // Deleting the fork releases its pin; the unpin completes the delete.
    let released = dst.run(Command::Delete { name: "f".into() }).unwrap();
    let pin = RemotePin {
        source: "s".into(),
        token: "tok".into(),
    };
    assert_eq!(
        released,
        Applied::Deleted {
            released: vec![pin.clone()]
        }
    );
    let unpin = Command::Unpin {
        name: pin.source.clone(),
        token: pin.token.clone(),
    };
    src.run(unpin.clone()).unwrap();
    assert_eq!(src.state.head("s", T0), Err(CoreError::NotFound));
    // A retried unpin changes nothing.
    assert_eq!(
        src.run(unpin),
        Ok(Applied::Unpinned {
            released: Vec::new()
        })
    );
}

#[test]
fn pins_and_copies_survive_checkpoints_and_replay() {
    let mut src = Harness::default();
    let mut dst = Harness::default();
    src.run(create("s", "text/plain")).unwrap();
    src.run(Command::Append(append("s", b"abc"))).unwrap();
    fork_across(&mut src, &mut dst, "f", "s", Some(2), 0, "tok").unwrap();
    dst.run(Command::Append(append("f", b"Z"))).unwrap();

    let delete = |state: &mut StreamsState, name: &str| {
        let entry = Entry {
            now_ms: T0,
            command: Command::Delete { name: name.into() },
        };
        state.apply(&entry, 0, 0).unwrap()
    };
    for mut state in [
        StreamsState::decode_checkpoint(&src.state.encode_checkpoint()).unwrap(),
        src.replayed(),
    ] {
        delete(&mut state, "s");
        assert_eq!(state.head("s", T0), Err(CoreError::Gone), "pin kept");
    }
    for mut state in [
        StreamsState::decode_checkpoint(&dst.state.encode_checkpoint()).unwrap(),
        dst.replayed(),
    ] {
        dst.state = state;
        assert_eq!(dst.read_all("f"), b"abZ");
        state = std::mem::take(&mut dst.state);
        assert_eq!(
            delete(&mut state, "f"),
            Applied::Deleted {
                released: vec![RemotePin {
                    source: "s".into(),
                    token: "tok".into()
                }]
            },
            "the copy remembers its pin"
        );
    }
}
