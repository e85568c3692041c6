//! `--peers` and `--zone`: every founder's address and zone, and this
//! node's zone.

use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Parses `1=HOST:PORT,2=HOST:PORT`, each entry with `@ZONE` or none:
/// the peers' addresses and their zones.
pub(crate) fn parse_peers(text: &str) -> Result<Peers, String> {
    let mut peers = BTreeMap::new();
    let mut zones = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .ok_or_else(|| format!("peer {item:?} is not ID=HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("peer {item:?}: {id:?} is not a node id"))?;
        let (addr, zone) = match addr.split_once('@') {
            Some((addr, zone)) => (addr, Some(zone.trim())),
            None => (addr, None),
        };
        let addr: SocketAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("peer {item:?}: {addr:?} is not HOST:PORT"))?;
        if peers.insert(id, addr.to_string()).is_some() {
            return Err(format!("node id {id} appears twice in --peers"));
        }
        if let Some(zone) = zone {
            runnel_engine::cluster::zones::validate(zone)
                .map_err(|e| format!("peer {item:?}: {e}"))?;
            zones.insert(id, zone.to_string());
        }
    }
    if peers.is_empty() {
        return Err("--peers lists no node".into());
    }
    if !zones.is_empty() && zones.len() != peers.len() {
        let without: Vec<String> = peers
            .keys()
            .filter(|id| !zones.contains_key(id))
            .map(u64::to_string)
            .collect();
        return Err(format!(
            "--peers names zones for some nodes but not for {}: give every node's zone \
             (ID=HOST:PORT@ZONE) or none, so that every founder places the cluster alike",
            without.join(", ")
        ));
    }
    Ok(Peers { peers, zones })
}

/// `--peers`, parsed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Peers {
    /// Each node's HTTP address.
    pub peers: BTreeMap<u64, String>,
    /// Each node's zone, when `--peers` gives them.
    pub zones: BTreeMap<u64, String>,
}

/// This node's zone from `--zone` and its `--peers` entry (in `zones`),
/// which must agree. A `--zone` alone (peers without zones: a node that
/// joins) is this node's only: founders place by `--peers` alone.
pub(super) fn own_zone(
    node_id: u64,
    flag: Option<String>,
    zones: &BTreeMap<u64, String>,
) -> Result<Option<String>, String> {
    if let Some(zone) = &flag {
        runnel_engine::cluster::zones::validate(zone).map_err(|e| format!("--zone: {e}"))?;
    }
    match (flag, zones.get(&node_id)) {
        (Some(flag), Some(listed)) if flag != *listed => Err(format!(
            "--zone {flag} but --peers puts node {node_id} in zone {listed}"
        )),
        (flag, listed) => Ok(flag.or(listed.cloned())),
    }
}
