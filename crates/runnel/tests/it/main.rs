//! Runnel's end-to-end tests: each module starts the real `runnel` binary
//! (single nodes and clusters on loopback, an S3 server for tiering) and
//! speaks to it as clients do. One test binary, so the dependency graph is
//! linked once and every test shares one pool of loopback ports; `common`
//! holds the helpers.

mod common;

mod auth;
mod auth_cluster;
mod bench;
mod caching;
mod cluster;
mod cluster_id;
mod cluster_version;
mod crash;
mod edges;
mod elastic;
mod fan_out;
mod fixtures;
mod forks;
mod healing;
mod history;
mod hostile;
mod http;
mod leadership;
mod listing;
mod live;
mod membership;
mod metrics;
mod rebalancing;
mod removed_node;
mod replica_move;
mod replication_factor;
mod restore_cluster;
mod shutdown;
mod slow_clients;
mod stream_cli;
mod subscriptions;
mod tier;
mod tier_cluster;
mod tls;
mod upgrade;
mod zones;
