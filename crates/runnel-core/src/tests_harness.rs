//! The test harness of the state machine: the state, a byte vector
//! standing in for the log, and a map standing in for the object store,
//! with the engine's part of tiering (building chunks, checking tiered
//! JSON boundaries, ending tiered JSON reads on a message) done the way
//! the engine does it.

use std::collections::HashMap;

use crate::command::*;
use crate::error::CoreError;
use crate::json::{frame_json_body, render_json_array};
use crate::offset::{Offset, ReadFrom};
use crate::state::{Applied, Slice, StreamsState};
use crate::tier::{ColdChunk, TierPolicy};

pub(crate) const T0: i64 = 1_700_000_000_000;

/// A tiered chunk's bytes and boundaries, as its object would hold them.
#[derive(Clone)]
pub(crate) struct TestObject {
    pub data: Vec<u8>,
    /// Append ends, and JSON streams' message ends, relative to the
    /// chunk's start.
    pub append_ends: Vec<u32>,
    pub message_ends: Vec<u32>,
}

/// The state machine plus a vector playing the log: an entry's data is
/// stored at `log.len()` and that index is its location. Objects are
/// keyed by their nonce.
#[derive(Default)]
pub(crate) struct Harness {
    pub(crate) state: StreamsState,
    pub(crate) log: Vec<u8>,
    pub(crate) entries: Vec<(Entry, u64, u64)>,
    pub(crate) objects: HashMap<u64, TestObject>,
}

impl Harness {
    /// The incarnation of live stream `name`.
    pub(crate) fn incarnation(&self, name: &str) -> u64 {
        self.state
            .stream_by_name(name)
            .expect("stream exists")
            .incarnation()
    }

    pub(crate) fn run_at(&mut self, now_ms: i64, command: Command) -> Result<Applied, CoreError> {
        let entry = Entry { now_ms, command };
        // Every entry goes through the codec, as it does in the engine.
        let entry = Entry::decode(&entry.encode()).unwrap();
        let data = entry
            .command
            .body()
            .map(|b| b.data.clone())
            .unwrap_or_default();
        let loc = self.log.len() as u64;
        self.log.extend_from_slice(&data);
        self.entries.push((entry.clone(), data.len() as u64, loc));
        self.state.apply(&entry, data.len() as u64, loc)
    }

    pub(crate) fn run(&mut self, command: Command) -> Result<Applied, CoreError> {
        self.run_at(T0, command)
    }

    /// Tiers what `policy` says is due, as the engine's tierer does:
    /// builds each chunk from the log, stores it, proposes the reference.
    pub(crate) fn tier_at(
        &mut self,
        now_ms: i64,
        policy: &TierPolicy,
    ) -> Vec<Result<Applied, CoreError>> {
        let work = self.state.tier_candidates(policy, now_ms);
        let mut answers = Vec::new();
        for w in work {
            let mut object = TestObject {
                data: Vec::new(),
                append_ends: Vec::new(),
                message_ends: Vec::new(),
            };
            let mut newest = i64::MIN;
            for p in &w.pieces {
                let base = object.data.len() as u32;
                object
                    .data
                    .extend_from_slice(&self.log[p.loc as usize..(p.loc + p.len) as usize]);
                if w.json {
                    if p.message_ends.is_empty() {
                        object.message_ends.push(object.data.len() as u32);
                    } else {
                        object
                            .message_ends
                            .extend(p.message_ends.iter().map(|e| base + e));
                    }
                }
                object.append_ends.push(object.data.len() as u32);
                newest = newest.max(p.at_ms);
            }
            let nonce = self.objects.len() as u64 + 1;
            let len = object.data.len() as u64;
            self.objects.insert(nonce, object);
            let chunk = ColdChunk {
                start: w.start,
                end: w.end,
                footer_len: 16,
                block_size: 1 << 20,
                newest_at_ms: newest,
                term: 0,
                node: 0,
                nonce,
            };
            assert_eq!(chunk.len(), len, "a chunk holds exactly its range");
            answers.push(self.run_at(
                now_ms,
                Command::Tier {
                    stream: w.stream,
                    term: 0,
                    chunk,
                },
            ));
        }
        answers
    }

    /// Tiers every hot byte of every stream.
    pub(crate) fn tier_everything(&mut self) {
        let policy = TierPolicy {
            min_bytes: 0,
            max_age_ms: 0,
            max_bytes: 1 << 20,
            pressure_before_loc: None,
            max_chunks: usize::MAX,
            max_pass_bytes: u64::MAX,
        };
        while self.tier_at(T0, &policy).iter().any(Result::is_ok) {}
    }

    /// The bytes a slice stands for.
    pub(crate) fn slice_bytes(&self, slice: &Slice) -> Vec<u8> {
        match slice {
            Slice::Log { loc, len } => self.log[*loc as usize..(loc + len) as usize].to_vec(),
            Slice::Object {
                chunk, from, to, ..
            } => {
                let object = &self.objects[&chunk.nonce];
                object.data[(from - chunk.start) as usize..(to - chunk.start) as usize].to_vec()
            }
        }
    }

    /// As the engine refuses it: a fork of a JSON `source` at `offset`
    /// inside a tiered chunk, not on one of its message ends.
    pub(crate) fn fork_point_inside_tiered_json(
        &self,
        source: &str,
        offset: u64,
    ) -> Option<CoreError> {
        let s = self.state.stream_by_name(source)?;
        if !s.is_json() {
            return None;
        }
        let chunk = s
            .cold_chunks()
            .iter()
            .find(|c| c.start < offset && offset < c.end)?;
        let ends = &self.objects[&chunk.nonce].message_ends;
        (!ends.contains(&((offset - chunk.start) as u32)))
            .then_some(CoreError::ForkOffsetNotOnBoundary)
    }

    pub(crate) fn read_at(
        &self,
        name: &str,
        from: ReadFrom,
        max: u64,
    ) -> Result<(Vec<u8>, crate::ReadPlan), CoreError> {
        let mut plan = self.state.plan_read(name, from, max, T0)?;
        // The engine's part: tiered JSON positions are checked, and a
        // tiered JSON read past the budget ends on a message boundary.
        if plan.starts_inside_tiered_json() {
            let Some(Slice::Object { chunk, from, .. }) = plan.slices.first() else {
                unreachable!()
            };
            let ends = &self.objects[&chunk.nonce].message_ends;
            if !ends.contains(&((from - chunk.start) as u32)) {
                return Err(CoreError::OffsetNotOnBoundary);
            }
        }
        if plan.info.kind == crate::ContentKind::Json && plan.byte_len() > plan.budget {
            if let Some(Slice::Object {
                chunk, from, to, ..
            }) = plan.slices.last().cloned()
            {
                let before = plan.byte_len() - (to - from);
                let room = plan.budget.saturating_sub(before);
                let ends = &self.objects[&chunk.nonce].message_ends;
                let rel = |e: &u32| chunk.start + u64::from(*e);
                let candidates: Vec<u64> = ends
                    .iter()
                    .map(rel)
                    .filter(|e| *e > from && *e <= to)
                    .collect();
                let end = candidates
                    .iter()
                    .copied()
                    .rfind(|e| e - from <= room)
                    .unwrap_or(candidates[0]);
                plan.end_at(end);
            }
        }
        let mut out = Vec::new();
        for s in &plan.slices {
            out.extend_from_slice(&self.slice_bytes(s));
        }
        Ok((out, plan))
    }

    /// What a fork in another group copies from `source` up to `point`,
    /// with the bytes, expanded as the engine does.
    pub(crate) fn fork_material(
        &self,
        source: &str,
        point: u64,
    ) -> Result<(crate::ForkMaterial, Vec<u8>), CoreError> {
        let (mut material, pieces) = self.state.fork_material(source, point)?;
        let mut data = Vec::new();
        for piece in pieces {
            match piece {
                crate::MaterialPiece::Log { chunk, loc } => {
                    data.extend_from_slice(&self.log[loc as usize..(loc + chunk.len) as usize]);
                    material.chunks.push(chunk);
                }
                crate::MaterialPiece::Object(slice) => {
                    let Slice::Object {
                        chunk, from, to, ..
                    } = &slice
                    else {
                        unreachable!()
                    };
                    let object = &self.objects[&chunk.nonce];
                    material
                        .chunks
                        .extend(crate::fork_copy::inherited_from_object(
                            chunk.start,
                            *from,
                            *to,
                            &object.append_ends,
                            &object.message_ends,
                            chunk.newest_at_ms,
                        ));
                    data.extend_from_slice(&self.slice_bytes(&slice));
                }
            }
        }
        Ok((material, data))
    }

    pub(crate) fn read_all(&self, name: &str) -> Vec<u8> {
        self.read_at(name, ReadFrom::Start, u64::MAX).unwrap().0
    }

    pub(crate) fn read_json(&self, name: &str) -> serde_json::Value {
        serde_json::from_slice(&render_json_array(&self.read_all(name))).unwrap()
    }

    /// Rebuilds a fresh state from the recorded entries, as recovery does,
    /// with the answers replay gives.
    pub(crate) fn replayed_with_answers(&self) -> (StreamsState, Vec<Result<Applied, CoreError>>) {
        let mut state = StreamsState::new();
        let mut answers = Vec::new();
        for (entry, len, loc) in &self.entries {
            let (header_only, data_len) = Entry::decode_header(&entry.encode()).unwrap();
            assert_eq!(data_len, *len);
            answers.push(state.apply(&header_only, data_len, *loc));
        }
        (state, answers)
    }

    pub(crate) fn replayed(&self) -> StreamsState {
        self.replayed_with_answers().0
    }
}

pub(crate) fn create(name: &str, ct: &str) -> Command {
    Command::Create(CreateStream {
        name: name.into(),
        content_type: Some(ct.into()),
        ..Default::default()
    })
}

pub(crate) fn create_with(name: &str, ct: &str, f: impl FnOnce(&mut CreateStream)) -> Command {
    let Command::Create(mut c) = create(name, ct) else {
        unreachable!()
    };
    f(&mut c);
    Command::Create(c)
}

pub(crate) fn fork(name: &str, source: &str, offset: Option<u64>, sub_offset: u64) -> Command {
    Command::Create(CreateStream {
        name: name.into(),
        fork: Some(ForkFrom {
            source: source.into(),
            offset,
            sub_offset,
        }),
        ..Default::default()
    })
}

pub(crate) fn append(name: &str, data: &[u8]) -> AppendToStream {
    AppendToStream {
        name: name.into(),
        content_type: Some("text/plain".into()),
        body: Body {
            data: data.to_vec(),
            message_ends: vec![],
        },
        producer: None,
        stream_seq: None,
        close: false,
    }
}

pub(crate) fn json_append(name: &str, body: &str) -> Command {
    let framed = frame_json_body(body.as_bytes(), false).unwrap();
    Command::Append(AppendToStream {
        name: name.into(),
        content_type: Some("application/json".into()),
        body: Body {
            data: framed.data,
            message_ends: framed.message_ends,
        },
        producer: None,
        stream_seq: None,
        close: false,
    })
}

pub(crate) fn with_producer(mut a: AppendToStream, id: &str, epoch: u64, seq: u64) -> Command {
    a.producer = Some(Producer {
        id: id.into(),
        epoch,
        seq,
    });
    Command::Append(a)
}

pub(crate) fn next_offset(applied: Applied) -> Offset {
    match applied {
        Applied::Appended { next_offset, .. } => next_offset,
        Applied::Created { stream, .. } => stream.next_offset,
        other => panic!("no offset in {other:?}"),
    }
}
