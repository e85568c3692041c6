//! Positions inside tiered history, checked before a command naming one
//! is proposed.
//!
//! The state machine keeps no message boundaries for tiered chunks, so it
//! accepts any position inside a tiered chunk of a JSON stream as one
//! (see `runnel_core::tier`). Here, before proposing, such positions are
//! checked against the chunk's footer: a trim, snapshot or fork offset
//! that is not a message boundary is refused as the state machine would
//! refuse it in hot history. A fork's sub-offset ("so many bytes or
//! messages of the append at the offset") is resolved into a position,
//! from the footer when the append is tiered and from the state when it
//! is hot, so that applying the fork never needs the append's extent: a
//! hot append may be tiered before the fork is applied, and a position,
//! once right, stays right.

use runnel_core::{Command, CoreError, ForkFrom, TieredView};

use super::reader;
use crate::error::{EngineError, TierReadError};
use crate::view::GroupView;

/// The command to propose for `command`: checked, and with fork
/// sub-offsets resolved to positions.
pub(crate) async fn prepare(view: &GroupView, command: Command) -> Result<Command, EngineError> {
    match command {
        Command::Trim { ref name, before } => {
            check_boundary(view, name, before, CoreError::TrimOffsetInvalid).await?;
            Ok(command)
        }
        Command::PutSnapshot(ref p) => {
            check_boundary(view, &p.name, p.offset, CoreError::SnapshotOffsetInvalid).await?;
            Ok(command)
        }
        // A fork that carries a copy of its source was resolved where the
        // source lives (by its pin).
        Command::Create(mut c) if c.inherit.is_none() => {
            if let Some(fork) = &mut c.fork {
                let source = fork.source.clone();
                resolve(view, &source, &mut fork.offset, &mut fork.sub_offset).await?;
            }
            Ok(Command::Create(c))
        }
        Command::Pin {
            name,
            token,
            mut offset,
            mut sub_offset,
        } => {
            resolve(view, &name, &mut offset, &mut sub_offset).await?;
            Ok(Command::Pin {
                name,
                token,
                offset,
                sub_offset,
            })
        }
        other => Ok(other),
    }
}

fn tiered_at(view: &GroupView, name: &str, pos: u64) -> Option<TieredView> {
    view.with_state(|s| s.tiered_at(name, pos))
}

/// Refuses `pos` with `refusal` when it lies strictly inside a tiered
/// chunk of a JSON stream and is not a message boundary there.
async fn check_boundary(
    view: &GroupView,
    name: &str,
    pos: u64,
    refusal: CoreError,
) -> Result<(), EngineError> {
    let Some(at) = tiered_at(view, name, pos).filter(|t| t.json && pos != t.chunk.start) else {
        return Ok(());
    };
    let footer = footer(view, &at).await?;
    let relative = (pos - at.chunk.start) as u32;
    if footer.message_ends.binary_search(&relative).is_ok() {
        Ok(())
    } else {
        Err(EngineError::Core(refusal))
    }
}

async fn footer(
    view: &GroupView,
    at: &TieredView,
) -> Result<std::sync::Arc<runnel_tier::Footer>, EngineError> {
    let tier = view
        .tier
        .as_ref()
        .ok_or(EngineError::Tier(TierReadError::NoStore))?;
    reader::footer(tier, at.owner, &at.chunk).await
}

/// Checks a fork offset of `source` and turns a sub-offset into the
/// position it denotes (`offset` becomes it, `sub_offset` 0). What cannot
/// be resolved is left for applying to refuse.
async fn resolve(
    view: &GroupView,
    source: &str,
    offset: &mut Option<u64>,
    sub_offset: &mut u64,
) -> Result<(), EngineError> {
    let base = match *offset {
        Some(o) => o,
        None => match view.with_state(|s| s.stream_by_name(source).map(|s| s.tail)) {
            Some(tail) => tail,
            None => return Ok(()),
        },
    };
    check_boundary(view, source, base, CoreError::ForkOffsetNotOnBoundary).await?;
    if *sub_offset == 0 {
        return Ok(());
    }
    let point = match tiered_at(view, source, base) {
        None => {
            let asked = ForkFrom {
                source: source.to_string(),
                offset: Some(base),
                sub_offset: *sub_offset,
            };
            match view.with_state(|s| s.fork_point(source, &asked)) {
                Ok(point) => point,
                // The append at `base` never changes, so a sub-offset past
                // its end is refused now: by the time the command applied,
                // tiering could have moved that append into an object,
                // where applying cannot resolve it (a 500, not this 400).
                Err(CoreError::SubOffsetOutOfRange) => {
                    return Err(EngineError::Core(CoreError::SubOffsetOutOfRange))
                }
                Err(_) => return Ok(()),
            }
        }
        Some(at) => {
            let footer = footer(view, &at).await?;
            let abs = |e: &u32| at.chunk.start + u64::from(*e);
            // The append holding the base position, as the view sees it.
            let append_end = footer
                .append_ends
                .iter()
                .map(abs)
                .find(|e| *e > base)
                .unwrap_or(at.end)
                .min(at.end);
            if at.json {
                let index = usize::try_from(*sub_offset - 1).unwrap_or(usize::MAX);
                footer
                    .message_ends
                    .iter()
                    .map(abs)
                    .filter(|e| *e > base && *e <= append_end)
                    .nth(index)
                    .ok_or(EngineError::Core(CoreError::SubOffsetOutOfRange))?
            } else {
                let point = base.saturating_add(*sub_offset);
                if point > append_end {
                    return Err(EngineError::Core(CoreError::SubOffsetOutOfRange));
                }
                point
            }
        }
    };
    *offset = Some(point);
    *sub_offset = 0;
    Ok(())
}
