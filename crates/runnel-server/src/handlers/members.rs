//! `POST /_runnel/cluster/groups/{group}/members?add=N&addr=HOST:PORT`
//! and `?remove=N`: one group's membership change, applied at the
//! group's leader (the request is forwarded there), for `admin`. `runnel
//! ctl node add` and `node remove` send one per group; each is
//! idempotent. `?retire=N` to group 0 removes a node that is in no group
//! from the cluster for good, and `?replication=R` to group 0 sets the
//! cluster's replication factor (`runnel ctl node rebalance`), and
//! `?zone=N:ZONE` records node N's zone, `?healing=pause|resume` pauses
//! or resumes self-healing and rebalancing, `?upgrade=finalize` raises
//! the cluster version, `?drain=N` (`?undrain=N`) marks node N as being
//! emptied, so that nothing is placed on it (or no longer). `?lead=N`
//! moves the group's leadership to its voter N, `?lead-away=N` off N if
//! N leads it (before N's replica moves away). Group 0 has five voters
//! at most: `?learn=N&addr=HOST:PORT` makes N one of its learners, and
//! `?demote=N` turns its voter N into one. The answer is the group's
//! voters, learners and leader after it.

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::Method;
use runnel_engine::cluster::membership::MemberChange;
use runnel_engine::error::MembershipError;
use runnel_engine::{ClusterOps, EngineError, Route};

use crate::error::ApiError;
use crate::headers::{percent_decode, strict_integer};
use crate::AppState;

pub const PREFIX: &str = "/_runnel/cluster/groups/";

pub async fn change(app: AppState, request: Request) -> Response {
    let (group, change) = match parse(&app, &request) {
        Ok(parsed) => parsed,
        Err(e) => return e.into_response(),
    };
    // A single node has no membership to change.
    let Some(cluster) = app.node.cluster() else {
        return ApiError::from(EngineError::Membership(MembershipError::SingleNode))
            .into_response();
    };
    match cluster.group_route(group) {
        Route::Local => apply(cluster, group, change)
            .await
            .unwrap_or_else(IntoResponse::into_response),
        Route::Forward { node, addr } => super::forward(&app, node, &addr, request).await,
        Route::NoLeader => {
            ApiError::Unavailable(format!("group {group} has no leader at the moment; retry"))
                .into_response()
        }
    }
}

fn parse(app: &AppState, request: &Request) -> Result<(u32, MemberChange), ApiError> {
    super::check_admin(app, request)?;
    if request.method() != Method::POST {
        return Err(ApiError::MethodNotAllowed);
    }
    let group = request
        .uri()
        .path()
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.strip_suffix("/members"))
        .ok_or(ApiError::NotFound)
        .and_then(|g| Ok(strict_integer(g, "the group")?))?;
    let group = u32::try_from(group).map_err(|_| ApiError::bad("no such group"))?;
    let (mut add, mut learn, mut addr, mut changes) = (None, None, None, Vec::new());
    for pair in request.uri().query().unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("add", value)) => add = Some(strict_integer(value, "add")?),
            Some(("learn", value)) => learn = Some(strict_integer(value, "learn")?),
            Some(("addr", value)) => addr = Some(percent_decode(value)?),
            Some(("remove", value)) => changes.push(MemberChange::Remove {
                node: strict_integer(value, "remove")?,
            }),
            Some(("demote", value)) => changes.push(MemberChange::Demote {
                node: strict_integer(value, "demote")?,
            }),
            Some(("retire", value)) => changes.push(MemberChange::Retire {
                node: strict_integer(value, "retire")?,
            }),
            Some(("lead", value)) => changes.push(MemberChange::Lead {
                node: strict_integer(value, "lead")?,
            }),
            Some(("lead-away", value)) => changes.push(MemberChange::LeadAway {
                node: strict_integer(value, "lead-away")?,
            }),
            Some(("prefer", value)) => changes.push(MemberChange::PreferLeaders {
                leaders: parse_leaders(value)?,
            }),
            Some(("zone", value)) => {
                let value = percent_decode(value)?;
                let (node, zone) = value
                    .split_once(':')
                    .ok_or_else(|| ApiError::bad(format!("{value:?} is not NODE_ID:ZONE")))?;
                changes.push(MemberChange::SetZone {
                    node: strict_integer(node, "the node id")?,
                    zone: zone.to_string(),
                });
            }
            Some(("healing", "pause")) => changes.push(MemberChange::PauseHealing { paused: true }),
            Some(("healing", "resume")) => {
                changes.push(MemberChange::PauseHealing { paused: false })
            }
            Some(("upgrade", "finalize")) => changes.push(MemberChange::FinalizeUpgrade),
            Some(("drain", value)) => changes.push(MemberChange::Drain {
                node: strict_integer(value, "drain")?,
                draining: true,
            }),
            Some(("undrain", value)) => changes.push(MemberChange::Drain {
                node: strict_integer(value, "undrain")?,
                draining: false,
            }),
            Some(("replication", value)) => {
                let factor = strict_integer(value, "replication")?;
                let factor = u32::try_from(factor).map_err(|_| {
                    ApiError::bad(format!("a replication factor of {factor} is too large"))
                })?;
                changes.push(MemberChange::SetReplication { factor });
            }
            _ => {}
        }
    }
    match (add, learn, addr) {
        (Some(node), None, Some(http_addr)) => changes.push(MemberChange::Add { node, http_addr }),
        (None, Some(node), Some(http_addr)) => {
            changes.push(MemberChange::Learn { node, http_addr })
        }
        (None, None, None) => {}
        _ => return Err(usage()),
    }
    let [change] = <[MemberChange; 1]>::try_from(changes).map_err(|_| usage())?;
    Ok((group, change))
}

fn usage() -> ApiError {
    ApiError::bad(
        "a membership change is one of ?add=NODE_ID&addr=HOST:PORT, \
         ?learn=NODE_ID&addr=HOST:PORT, ?remove=NODE_ID, ?demote=NODE_ID, ?retire=NODE_ID, \
         ?replication=FACTOR, ?zone=NODE_ID:ZONE, ?healing=pause|resume, ?upgrade=finalize, ?drain=NODE_ID, ?undrain=NODE_ID, ?lead=NODE_ID, ?lead-away=NODE_ID or \
         ?prefer=GROUP:NODE_ID,...",
    )
}

/// `GROUP:NODE_ID,...` (`:` and `,` may come percent-encoded).
fn parse_leaders(value: &str) -> Result<Vec<(u32, u64)>, ApiError> {
    let value = percent_decode(value)?;
    let most = runnel_core::cluster_meta::MAX_GROUPS as usize;
    if value.split(',').count() > most {
        return Err(ApiError::bad(format!(
            "at most {most} preferred leaders in one request"
        )));
    }
    value
        .split(',')
        .map(|pair| {
            let (group, node) = pair
                .split_once(':')
                .ok_or_else(|| ApiError::bad(format!("{pair:?} is not GROUP:NODE_ID")))?;
            let group = strict_integer(group, "the group")?;
            let group = u32::try_from(group).map_err(|_| ApiError::bad("no such group"))?;
            Ok((group, strict_integer(node, "the node id")?))
        })
        .collect()
}

async fn apply(
    cluster: &dyn ClusterOps,
    group: u32,
    change: MemberChange,
) -> Result<Response, ApiError> {
    let report = cluster.change_member(group, change).await?;
    let body = serde_json::to_vec(&report).unwrap_or_default();
    Ok(([(http::header::CONTENT_TYPE, "application/json")], body).into_response())
}
