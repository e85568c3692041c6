//! Node-level behaviour: commands commit and apply, concurrent proposals
//! share fsyncs, state survives reopening, and live readers are woken.

use std::sync::Arc;
use std::time::Duration;

use runnel_core::{AppendToStream, Applied, Body, Command, CreateStream, Offset, ReadFrom};
use runnel_engine::{EngineConfig, Node};

fn create(name: &str) -> Command {
    Command::Create(CreateStream {
        name: name.into(),
        content_type: Some("text/plain".into()),
        ..Default::default()
    })
}

fn append(name: &str, data: &[u8]) -> Command {
    Command::Append(AppendToStream {
        name: name.into(),
        content_type: Some("text/plain".into()),
        body: Body {
            data: data.to_vec(),
            message_ends: vec![],
        },
        producer: None,
        stream_seq: None,
        close: false,
    })
}

async fn read_all(node: &Node, name: &str) -> Vec<u8> {
    node.read(name, ReadFrom::Start, u64::MAX)
        .await
        .unwrap()
        .body
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_all_commit_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.groups = 4;
    let expected: Vec<(String, Vec<u8>)>;
    {
        let node = Node::open(&config).unwrap();
        let mut tasks = Vec::new();
        for s in 0..16 {
            let node = Arc::clone(&node);
            tasks.push(tokio::spawn(async move {
                let name = format!("stream-{s}");
                node.propose(create(&name)).await.unwrap();
                let mut content = Vec::new();
                for i in 0..50 {
                    let data = format!("[{s}:{i}]");
                    let applied = node.propose(append(&name, data.as_bytes())).await.unwrap();
                    content.extend_from_slice(data.as_bytes());
                    match applied {
                        Applied::Appended { next_offset, .. } => {
                            assert_eq!(next_offset, Offset(content.len() as u64))
                        }
                        other => panic!("{other:?}"),
                    }
                }
                (name, content)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.unwrap());
        }
        for (name, content) in &all {
            assert_eq!(&read_all(&node, name).await, content);
        }
        expected = all;
    }
    let node = Node::open(&config).unwrap();
    for (name, content) in &expected {
        assert_eq!(&read_all(&node, name).await, content, "{name} after reopen");
    }
    // Offsets continue where they were.
    let applied = node.propose(append("stream-0", b"more")).await.unwrap();
    assert!(
        matches!(applied, Applied::Appended { next_offset, .. } if next_offset.0 == expected[0].1.len() as u64 + 4)
    );
}

#[tokio::test]
async fn a_different_group_count_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig::new(dir.path());
    drop(Node::open(&config).unwrap());
    let mut other = config.clone();
    other.groups = 8;
    let err = Node::open(&other)
        .err()
        .expect("group count is part of the data format");
    assert!(err.to_string().contains("groups"), "{err}");
}

#[tokio::test]
async fn readers_are_woken_by_commits_to_their_stream() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::open(&EngineConfig::new(dir.path())).unwrap();
    node.propose(create("live")).await.unwrap();
    let id = node.head("live").unwrap().id;
    let mut changes = node.engine_for("live").subscribe(id);
    let writer = {
        let node = Arc::clone(&node);
        tokio::spawn(async move { node.propose(append("live", b"tick")).await.unwrap() })
    };
    tokio::time::timeout(Duration::from_secs(5), changes.changed())
        .await
        .expect("woken within 5 s")
        .unwrap();
    writer.await.unwrap();
    assert_eq!(read_all(&node, "live").await, b"tick");
}

#[tokio::test]
async fn expired_streams_are_swept_and_their_names_freed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.sweep_interval = Duration::from_millis(50);
    let node = Node::open(&config).unwrap();
    let Command::Create(mut c) = create("short") else {
        unreachable!()
    };
    c.ttl_secs = Some(1);
    node.propose(Command::Create(c)).await.unwrap();
    assert_eq!(node.groups()[0].stream_count(), 1);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(node.groups()[0].stream_count(), 0, "the sweeper removed it");
    assert!(matches!(
        node.propose(create("short")).await.unwrap(),
        Applied::Created { created: true, .. }
    ));
}

/// Segment files only: the log directory may also hold a spare.
fn segment_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("log"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("log".as_ref()))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_reclaim_dead_segments_and_recover_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.segment_bytes = 4096;
    config.groups = 2;
    let payload = vec![b'x'; 500];
    {
        let node = Node::open(&config).unwrap();
        for name in ["dead-a", "dead-b", "trimmed", "alive"] {
            node.propose(create(name)).await.unwrap();
        }
        // Segments are reclaimed whole: the doomed data is written first.
        for _ in 0..40 {
            for name in ["dead-a", "dead-b", "trimmed"] {
                node.propose(append(name, &payload)).await.unwrap();
            }
        }
        for _ in 0..40 {
            node.propose(append("alive", &payload)).await.unwrap();
        }
        let trim_at = node.head("trimmed").unwrap().next_offset.0;
        node.propose(append("trimmed", b"kept")).await.unwrap();
        node.propose(Command::Trim {
            name: "trimmed".into(),
            before: trim_at,
        })
        .await
        .unwrap();
        node.propose(Command::Delete {
            name: "dead-a".into(),
        })
        .await
        .unwrap();
        node.propose(Command::Delete {
            name: "dead-b".into(),
        })
        .await
        .unwrap();
        // Fill a few more segments so the dead ones lie behind the tail.
        for _ in 0..20 {
            node.propose(append("alive", &payload)).await.unwrap();
        }
        let before = segment_files(dir.path());
        let reclaimed = node.checkpoint().await.unwrap();
        let after = segment_files(dir.path());
        assert!(reclaimed > 0, "nothing reclaimed");
        assert!(after < before, "{before} segments before, {after} after");
        assert_eq!(read_all(&node, "trimmed").await, b"kept");
        assert_eq!(read_all(&node, "alive").await.len(), 60 * 500);
        node.propose(append("alive", b"!")).await.unwrap();
    }
    // Recovery: checkpoint plus the records after it; gaps are expected.
    let node = Node::open(&config).unwrap();
    assert_eq!(read_all(&node, "trimmed").await, b"kept");
    let alive = read_all(&node, "alive").await;
    assert_eq!(alive.len(), 60 * 500 + 1);
    assert!(alive.ends_with(b"!"));
    assert!(node.head("dead-a").is_err());
    node.propose(append("alive", b"?")).await.unwrap();
    drop(node);

    // Without its checkpoint, a collected log refuses to open rather than
    // treating the gaps as corruption.
    std::fs::remove_file(dir.path().join("checkpoint")).unwrap();
    let err = Node::open(&config)
        .err()
        .expect("a collected log needs its checkpoint");
    assert!(err.to_string().contains("checkpoint"), "{err}");
}

/// A few live bytes no longer keep a segment of dead ones: a checkpoint
/// moves them forward, the next one deletes the segment, and recovery
/// reads the moved bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_segments_are_copied_forward_and_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.segment_bytes = 4096;
    config.groups = 2;
    let junk = vec![b'j'; 900];
    let mut expected = Vec::new();
    {
        let node = Node::open(&config).unwrap();
        for name in ["keep", "junk", "tail"] {
            node.propose(create(name)).await.unwrap();
        }
        // Every segment gets a little of "keep" and much of "junk".
        for i in 0..40 {
            let piece = format!("keep-{i};");
            node.propose(append("keep", piece.as_bytes()))
                .await
                .unwrap();
            expected.extend_from_slice(piece.as_bytes());
            for _ in 0..4 {
                node.propose(append("junk", &junk)).await.unwrap();
            }
        }
        node.propose(Command::Delete {
            name: "junk".into(),
        })
        .await
        .unwrap();
        for _ in 0..12 {
            node.propose(append("tail", &junk)).await.unwrap();
        }
        let before = segment_files(dir.path());
        // Live bytes keep their segments the first time: at most what two
        // segments hold is reclaimed (a segment can end early, holding
        // only the deleted stream's bytes, when a commit batch did not fit:
        // how batches fall depends on the machine's load).
        let first = node.checkpoint().await.unwrap();
        let kept = segment_files(dir.path());
        assert!(
            first <= 2 * 4096,
            "{before} segments before, {kept} after, {first} bytes reclaimed: live bytes in \
             every segment keep them the first time"
        );
        assert_eq!(
            read_all(&node, "keep").await,
            expected,
            "reads follow the move"
        );
        // The moved bytes are at the head now; the next checkpoint frees
        // the old segments.
        node.propose(append("tail", b"+")).await.unwrap();
        let reclaimed = node.checkpoint().await.unwrap();
        let after = segment_files(dir.path());
        assert!(
            reclaimed >= 30 * 4096 && after * 3 < before,
            "{before} segments before, {after} after, {reclaimed} bytes reclaimed"
        );
        assert_eq!(read_all(&node, "keep").await, expected);
        node.propose(append("keep", b"last;")).await.unwrap();
        expected.extend_from_slice(b"last;");
    }
    for _ in 0..2 {
        let node = Node::open(&config).unwrap();
        assert_eq!(read_all(&node, "keep").await, expected);
        assert!(node.head("junk").is_err());
        assert_eq!(read_all(&node, "tail").await.len(), 12 * 900 + 1);
        node.checkpoint().await.unwrap();
    }
}
