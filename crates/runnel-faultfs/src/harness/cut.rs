//! Cutting the power, through the control socket, at a moment when the
//! cut loses something: at a write to a chosen path (that very write is
//! never synced), or as soon as some written data is not durable yet.
//! Either may keep a torn prefix of a write. A cut whose moment does not
//! come falls back to the next write to any file, then to unsynced data;
//! one that finds nothing to lose at all cuts anyway, and its report says
//! it dropped nothing, which fails the cycle
//! ([`super::verdict::Untested::NoDroppedBytes`]).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::model::CutReport;

use super::control;
use super::error::{HarnessError, Result};

/// How a power cut is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CutPlan {
    /// At the next write to a path containing `path`: the write reaches
    /// the file, then the power fails (with `torn`, a prefix of that write
    /// survives, chosen by the seed). If no such write comes in time, as
    /// [`CutPlan::Unsynced`].
    AtWrite { path: String, torn: Option<u32> },
    /// As soon as a cut would drop written data (with `torn`, a prefix of
    /// some file's last unsynced write survives).
    Unsynced { torn: Option<u32> },
}

impl std::fmt::Display for CutPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let torn = |t: &Option<u32>| if t.is_some() { ", torn" } else { "" };
        match self {
            CutPlan::AtWrite { path, torn: t } => write!(f, "at a write to {path}{}", torn(t)),
            CutPlan::Unsynced { torn: t } => write!(f, "with data unsynced{}", torn(t)),
        }
    }
}

fn torn_words(torn: Option<u32>) -> String {
    torn.map(|seed| format!(" torn {seed}")).unwrap_or_default()
}

fn report_of(value: serde_json::Value) -> Result<CutReport> {
    serde_json::from_value(value).map_err(|e| HarnessError::Setup(format!("a cut's report: {e}")))
}

/// Poll interval while waiting for the moment to cut.
const POLL: Duration = Duration::from_millis(2);
/// How long each fallback waits.
const FALLBACK: Duration = Duration::from_secs(2);

/// Cuts the power of the file system behind `socket` as `plan` says,
/// waiting at most `patience` for the moment; the cut's report. If the
/// moment does not come, the cut comes at the next write to any file
/// (which is unsynced then), else as soon as written data is unsynced,
/// else at once (and its report says it dropped nothing).
pub async fn cut_power(socket: &Path, plan: &CutPlan, patience: Duration) -> Result<CutReport> {
    let torn = match plan {
        CutPlan::AtWrite { path, torn } => {
            if let Some(report) = at_write(socket, path, *torn, patience).await? {
                return Ok(report);
            }
            *torn
        }
        CutPlan::Unsynced { torn } => {
            if let Some(report) = if_unsynced(socket, *torn, patience).await? {
                return Ok(report);
            }
            *torn
        }
    };
    if let Some(report) = at_write(socket, "/", torn, FALLBACK).await? {
        return Ok(report);
    }
    if let Some(report) = if_unsynced(socket, torn, FALLBACK).await? {
        return Ok(report);
    }
    report_of(control(socket, &format!("power-cut{}", torn_words(torn))).await?)
}

/// Arms a cut at the next write to a path containing `path`; `None` (and
/// disarmed) if none comes within `patience`.
async fn at_write(
    socket: &Path,
    path: &str,
    torn: Option<u32>,
    patience: Duration,
) -> Result<Option<CutReport>> {
    let started = Instant::now();
    control(
        socket,
        &format!("power-cut-at-write {path}{}", torn_words(torn)),
    )
    .await?;
    loop {
        let stats = control(socket, "stats").await?;
        if stats["alive"] == false {
            return report_of(stats["last_cut"].clone()).map(Some);
        }
        if started.elapsed() >= patience {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    control(socket, "clear-faults").await?;
    // It may have fired just before being disarmed.
    let stats = control(socket, "stats").await?;
    if stats["alive"] == false {
        return report_of(stats["last_cut"].clone()).map(Some);
    }
    Ok(None)
}

/// Cuts as soon as written data is unsynced; `None` if none is within
/// `patience`.
async fn if_unsynced(
    socket: &Path,
    torn: Option<u32>,
    patience: Duration,
) -> Result<Option<CutReport>> {
    let started = Instant::now();
    let command = format!("power-cut-if-unsynced{}", torn_words(torn));
    while started.elapsed() < patience {
        let answer = control(socket, &command).await?;
        if !answer.is_null() {
            return report_of(answer).map(Some);
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(None)
}

/// Short text for a power cut's report: bytes dropped (and of them
/// written data), lost entries, torn write.
pub fn describe(cut: &CutReport) -> String {
    let mut text = format!(
        "dropped {} B ({} B written data)",
        cut.bytes_dropped, cut.written_bytes_dropped
    );
    if !cut.lost_paths.is_empty() {
        text += &format!(", lost entries {}", cut.lost_paths.join(" "));
    }
    if !cut.restored_paths.is_empty() {
        text += &format!(", restored entries {}", cut.restored_paths.join(" "));
    }
    if let Some(torn) = &cut.torn {
        text += &format!(
            ", torn {}@{} kept {}/{} B",
            torn.path, torn.offset, torn.kept, torn.len
        );
    }
    text
}
