//! Reads of tiered bytes: a read plan's object slices fetched through the
//! block cache (blocks verified before use), tiered JSON reads checked
//! against and ended on the chunk's message boundaries, read-ahead for
//! sequential readers, snapshot objects, and a fork's copy of tiered
//! history expanded from the chunk's footer.

use std::sync::Arc;

use bytes::Bytes;
use runnel_core::fork_copy::inherited_from_object;
use runnel_core::{
    ColdChunk, ContentKind, CoreError, ForkMaterial, MaterialPiece, ReadPlan, Slice, StreamId,
};
use runnel_tier::{Footer, Layout, ObjectPath as Path};

use super::{chunk_id, layout, read_failed, GroupTier};
use crate::api::ReadResult;
use crate::error::{EngineError, TierReadError};
use crate::view::GroupView;

fn no_store() -> EngineError {
    EngineError::Tier(TierReadError::NoStore)
}

fn is_object(slice: &Slice) -> bool {
    matches!(slice, Slice::Object { .. })
}

/// Fetches a plan's bytes.
pub(crate) async fn fetch(view: &GroupView, mut plan: ReadPlan) -> Result<ReadResult, EngineError> {
    if !plan.slices.iter().any(is_object) {
        let (start, next) = (plan.start.position(), plan.next.position());
        let body = if plan.byte_len() == next - start {
            view.pages
                .get_or_read(plan.info.id, start, next, || view.copy_log(&plan.slices))?
        } else {
            view.copy_log(&plan.slices)?
        };
        return Ok(ReadResult { plan, body });
    }
    let tier = view.tier.as_ref().ok_or_else(no_store)?;
    if plan.starts_inside_tiered_json() {
        let Some(Slice::Object {
            stream,
            chunk,
            from,
            ..
        }) = plan.slices.first()
        else {
            unreachable!("checked by starts_inside_tiered_json")
        };
        let footer = footer(tier, *stream, chunk).await?;
        if !is_message_end(&footer, chunk, *from) {
            return Err(EngineError::Core(CoreError::OffsetNotOnBoundary));
        }
    }
    if plan.info.kind == ContentKind::Json && plan.byte_len() > plan.budget {
        if let Some(Slice::Object {
            stream,
            chunk,
            from,
            to,
        }) = plan.slices.last().cloned()
        {
            let room = plan.budget.saturating_sub(plan.byte_len() - (to - from));
            let footer = footer(tier, stream, &chunk).await?;
            plan.end_at(json_end(&footer, &chunk, from, to, room)?);
        }
    }
    let body = assemble(view, tier, &plan.slices).await?;
    if let Some(Slice::Object {
        stream,
        chunk,
        from,
        to,
    }) = plan.slices.last()
    {
        read_ahead(view, tier, *stream, chunk, *from, *to);
    }
    Ok(ReadResult { plan, body })
}

/// Where a tiered JSON read of `from..to` ends: on the last message end
/// within `room` bytes, or after one message.
fn json_end(
    footer: &Footer,
    chunk: &ColdChunk,
    from: u64,
    to: u64,
    room: u64,
) -> Result<u64, EngineError> {
    let mut ends = footer
        .message_ends
        .iter()
        .map(|e| chunk.start + u64::from(*e))
        .filter(|e| *e > from && *e <= to);
    let first = ends
        .next()
        .ok_or(EngineError::Tier(TierReadError::Corrupt {
            start: chunk.start,
            end: chunk.end,
            from,
        }))?;
    Ok(std::iter::once(first)
        .chain(ends)
        .take_while(|e| *e - from <= room)
        .last()
        .unwrap_or(first))
}

fn is_message_end(footer: &Footer, chunk: &ColdChunk, pos: u64) -> bool {
    pos == chunk.start
        || footer
            .message_ends
            .binary_search(&((pos - chunk.start) as u32))
            .is_ok()
}

/// The footer of a chunk of stream `owner`.
pub(crate) async fn footer(
    tier: &GroupTier,
    owner: StreamId,
    chunk: &ColdChunk,
) -> Result<Arc<Footer>, EngineError> {
    let path = chunk_id(tier.group, owner, chunk).path();
    let footer_pos = layout(chunk).footer_pos();
    tier.tiering
        .cache
        .footer(&path, footer_pos, footer_pos + u64::from(chunk.footer_len))
        .await
        .map_err(|e| read_failed(&tier.tiering, e))
}

/// Object slices of one read fetched at the same time: a catch-up over
/// many small chunks would otherwise wait for one store round trip per
/// chunk, one after another.
const CONCURRENT_OBJECT_SLICES: usize = 16;

/// The slices' bytes, in order.
async fn assemble(
    view: &GroupView,
    tier: &GroupTier,
    slices: &[Slice],
) -> Result<Bytes, EngineError> {
    use futures::stream::{FuturesOrdered, StreamExt};

    if let [Slice::Object {
        stream,
        chunk,
        from,
        to,
    }] = slices
    {
        // One object slice (a stream's history in one chunk, the common
        // case): its pieces are slices of cached blocks, and one piece is
        // served as it is, without a copy.
        let path = chunk_id(tier.group, *stream, chunk).path();
        let mut pieces = object_pieces(tier, &path, layout(chunk), *from, *to).await?;
        if pieces.len() == 1 {
            return Ok(pieces.pop().expect("one piece"));
        }
        return Ok(Bytes::from(pieces.concat()));
    }
    let total: u64 = slices.iter().map(Slice::len).sum();
    let mut body = Vec::with_capacity(total as usize);
    // Fetched ahead of the copy loop below, which takes them in order.
    let mut waiting = slices.iter().filter_map(|slice| match slice {
        Slice::Object {
            stream,
            chunk,
            from,
            to,
        } => Some((
            chunk_id(tier.group, *stream, chunk).path(),
            layout(chunk),
            *from,
            *to,
        )),
        Slice::Log { .. } => None,
    });
    let mut objects = FuturesOrdered::new();
    for (path, layout, from, to) in waiting.by_ref().take(CONCURRENT_OBJECT_SLICES) {
        objects.push_back(owned_object_pieces(tier, path, layout, from, to));
    }
    for slice in slices {
        match slice {
            Slice::Log { loc, len } => {
                let at = body.len();
                body.resize(at + *len as usize, 0);
                view.log
                    .read_at(*loc, &mut body[at..])
                    .map_err(EngineError::Storage)?;
            }
            Slice::Object { .. } => {
                let pieces = objects.next().await.expect("one fetch per object slice")?;
                if let Some((path, layout, from, to)) = waiting.next() {
                    objects.push_back(owned_object_pieces(tier, path, layout, from, to));
                }
                for piece in pieces {
                    body.extend_from_slice(&piece);
                }
            }
        }
    }
    Ok(Bytes::from(body))
}

/// Appends stream positions `from..to` of an object to `out`.
pub(crate) async fn object_range(
    tier: &GroupTier,
    path: &Path,
    layout: Layout,
    from: u64,
    to: u64,
    out: &mut Vec<u8>,
) -> Result<(), EngineError> {
    for piece in object_pieces(tier, path, layout, from, to).await? {
        out.extend_from_slice(&piece);
    }
    Ok(())
}

async fn owned_object_pieces(
    tier: &GroupTier,
    path: Path,
    layout: Layout,
    from: u64,
    to: u64,
) -> Result<Vec<Bytes>, EngineError> {
    object_pieces(tier, &path, layout, from, to).await
}

/// Stream positions `from..to` of an object as slices of its cached
/// blocks, the blocks fetched at once.
async fn object_pieces(
    tier: &GroupTier,
    path: &Path,
    layout: Layout,
    from: u64,
    to: u64,
) -> Result<Vec<Bytes>, EngineError> {
    if from >= to {
        return Ok(Vec::new());
    }
    let blocks = layout.block_of(from)..=layout.block_of(to - 1);
    let cache = &tier.tiering.cache;
    let fetched =
        futures::future::join_all(blocks.clone().map(|i| cache.block(path, layout, i))).await;
    blocks
        .zip(fetched)
        .map(|(i, block)| {
            let block = block.map_err(|e| read_failed(&tier.tiering, e))?;
            let span = layout.block_span(i);
            let lo = from.max(span.start) - span.start;
            let hi = to.min(span.end) - span.start;
            Ok(block.slice(lo as usize..hi as usize))
        })
        .collect()
}

/// After a read that ended at `to` in `chunk`: if the reader looks
/// sequential (it started at the chunk's start, or the block before the
/// one it started in is cached), fetch the next blocks before it asks,
/// across into the stream's next chunk.
fn read_ahead(
    view: &GroupView,
    tier: &GroupTier,
    owner: StreamId,
    chunk: &ColdChunk,
    from: u64,
    to: u64,
) {
    let blocks = u64::from(tier.tiering.config.readahead_blocks);
    if blocks == 0 {
        return;
    }
    let cache = &tier.tiering.cache;
    let lay = layout(chunk);
    let path = chunk_id(tier.group, owner, chunk).path();
    let start_block = lay.block_of(from);
    let sequential =
        from == chunk.start || (start_block > 0 && cache.holds(&path, start_block - 1));
    if !sequential {
        return;
    }
    let mut left = blocks;
    if to < chunk.end {
        let next = lay.block_of(to);
        for i in next..(next + blocks).min(lay.block_count()) {
            cache.prefetch(&path, lay, i);
            left -= 1;
        }
    }
    if left == 0 {
        return;
    }
    // Into the following chunk of the same stream, if there is one.
    let following = view.with_state(|state| {
        let s = state.stream(owner)?;
        let chunks = s.cold_chunks();
        let i = chunks.partition_point(|c| c.start < chunk.end);
        chunks.get(i).filter(|c| c.start == chunk.end)
    });
    if let Some(next) = following {
        let next_layout = layout(&next);
        let next_path = chunk_id(tier.group, owner, &next).path();
        for i in 0..left.min(next_layout.block_count()) {
            cache.prefetch(&next_path, next_layout, i);
        }
    }
}

/// The bytes of a snapshot stored as an object.
pub(crate) async fn snapshot_object(
    view: &GroupView,
    stream: StreamId,
    offset: u64,
    object: &ColdChunk,
) -> Result<Bytes, EngineError> {
    let tier = view.tier.as_ref().ok_or_else(no_store)?;
    let path = super::snapshot_id(tier.group, stream, offset, object).path();
    let mut out = Vec::with_capacity(object.len() as usize);
    object_range(
        tier,
        &path,
        layout(object),
        object.start,
        object.end,
        &mut out,
    )
    .await?;
    Ok(Bytes::from(out))
}

/// A fork's copy of its source: chunks and bytes from the pieces the
/// state machine planned.
pub(crate) async fn material(
    view: &GroupView,
    mut material: ForkMaterial,
    pieces: Vec<MaterialPiece>,
) -> Result<(ForkMaterial, Bytes), EngineError> {
    let mut data = Vec::new();
    for piece in pieces {
        match piece {
            MaterialPiece::Log { chunk, loc } => {
                let at = data.len();
                data.resize(at + chunk.len as usize, 0);
                view.log
                    .read_at(loc, &mut data[at..])
                    .map_err(EngineError::Storage)?;
                material.chunks.push(chunk);
            }
            MaterialPiece::Object(Slice::Object {
                stream,
                chunk,
                from,
                to,
            }) => {
                let tier = view.tier.as_ref().ok_or_else(no_store)?;
                let footer = footer(tier, stream, &chunk).await?;
                material.chunks.extend(inherited_from_object(
                    chunk.start,
                    from,
                    to,
                    &footer.append_ends,
                    &footer.message_ends,
                    chunk.newest_at_ms,
                ));
                let path = chunk_id(tier.group, stream, &chunk).path();
                object_range(tier, &path, layout(&chunk), from, to, &mut data).await?;
            }
            MaterialPiece::Object(Slice::Log { .. }) => {
                unreachable!("object pieces hold object slices")
            }
        }
    }
    Ok((material, Bytes::from(data)))
}
