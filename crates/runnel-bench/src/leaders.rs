//! Leader-aware routing for a Runnel cluster: which of the targets leads
//! each stream's group, so that a benchmark can send each stream's
//! requests there, as a leader-aware client or load balancer would,
//! rather than round robin (which makes most requests take a forward hop
//! inside the cluster).

use bytes::Bytes;
use http::Method;

use crate::client::{Connection, Target};
use crate::BenchError;

/// For each of `names`, the index in `targets` of the node that serves
/// it: the node id a HEAD of the stream names in `runnel-served-by`,
/// matched with the `node_id` each target's `/_runnel/status` reports.
pub async fn leader_of_each(
    targets: &[Target],
    names: &[String],
) -> Result<Vec<usize>, BenchError> {
    let mut ids = Vec::with_capacity(targets.len());
    for target in targets {
        let mut conn = Connection::open(target).await?;
        let reply = conn
            .send(Method::GET, "/_runnel/status", &[], Bytes::new())
            .await?;
        let status: serde_json::Value = serde_json::from_slice(&reply.body)
            .map_err(|e| BenchError::Setup(format!("/_runnel/status: {e}")))?;
        let id = status["node_id"].as_u64().ok_or_else(|| {
            BenchError::Setup("--to-leader needs Runnel cluster nodes as targets".into())
        })?;
        ids.push(id);
    }
    let mut conn = Connection::open(&targets[0]).await?;
    let mut leaders = Vec::with_capacity(names.len());
    for name in names {
        let path = format!("/v1/stream/{name}");
        let reply = conn.send(Method::HEAD, &path, &[], Bytes::new()).await?;
        let served_by = reply
            .headers
            .get("runnel-served-by")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .ok_or_else(|| BenchError::Setup(format!("HEAD {path} named no serving node")))?;
        let at = ids.iter().position(|id| *id == served_by).ok_or_else(|| {
            BenchError::Setup(format!(
                "node {served_by} serves {name} but is not a target"
            ))
        })?;
        leaders.push(at);
    }
    Ok(leaders)
}
