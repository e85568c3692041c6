//! The answering side of the Raft transport: the listener on the Raft
//! port, one task per connection, and one task per request, so a slow
//! append of one group does not hold up the votes of another.

use std::sync::Arc;

use runnel_wire::raft::frame::{
    decode_request, read_frame, status_frame, PeerRequest, RequestHead,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{hello, response_frame, write_frames, ServeError, Served, CONNECT_TIMEOUT};

/// Answers the Raft RPCs of every group arriving on `listener`, over
/// mutual TLS when `tls` is given.
pub(crate) async fn serve(
    listener: TcpListener,
    served: Arc<Served>,
    tls: Option<Arc<runnel_tls::ClusterTls>>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!(error = %err, "raft accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let served = Arc::clone(&served);
        match &tls {
            None => {
                tokio::spawn(serve_connection(stream, served));
            }
            Some(tls) => {
                let tls = Arc::clone(tls);
                tokio::spawn(async move {
                    match tokio::time::timeout(CONNECT_TIMEOUT * 5, tls.accept(stream)).await {
                        Ok(Ok((stream, _peer))) => serve_connection(stream, served).await,
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "raft connection refused: TLS")
                        }
                        Err(_) => tracing::warn!("raft connection refused: TLS timed out"),
                    }
                });
            }
        }
    }
}

pub(super) async fn serve_connection(
    stream: impl AsyncRead + AsyncWrite + Send + 'static,
    served: Arc<Served>,
) {
    let (mut reader, writer) = tokio::io::split(stream);
    let (responses, outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(write_frames(writer, outgoing));
    let Ok(first) = read_frame(&mut reader).await else {
        return;
    };
    let (status, body) = hello::answer(&*served.identity, &*served.retired, &first);
    if status != 1 {
        let reason = String::from_utf8_lossy(&body).into_owned();
        tracing::warn!(%reason, "raft connection refused");
    }
    let _ = responses.send(status_frame(0, status, &body));
    if status != 1 {
        return;
    }
    while let Ok(frame) = read_frame(&mut reader).await {
        let Some((head, _)) = RequestHead::split(&frame) else {
            tracing::warn!("short raft request frame; closing the connection");
            break;
        };
        let (served, responses) = (Arc::clone(&served), responses.clone());
        tokio::spawn(async move {
            let body = RequestHead::split(&frame).map_or(&[][..], |(_, body)| body);
            let answer = answer(&served, head.kind, head.group, body).await;
            let _ = responses.send(response_frame(head.id, answer));
        });
    }
}

async fn answer(served: &Served, kind: u8, group: u32, body: &[u8]) -> Result<Vec<u8>, ServeError> {
    let raft = served.group_raft(group)?;
    let encoded = match decode_request(kind, body)? {
        PeerRequest::Append(request) => bincode::serialize(&raft.append_entries(request).await),
        PeerRequest::Vote(_) if served.refuses_vote(group) => return Err(ServeError::VoteHeld),
        PeerRequest::Vote(request) => bincode::serialize(&raft.vote(request).await),
        PeerRequest::Snapshot(request) => bincode::serialize(&raft.install_snapshot(request).await),
        PeerRequest::Probe => bincode::serialize(&served.probe(group).await?),
        PeerRequest::ReadIndex => bincode::serialize(&served.read_index(group).await?),
        PeerRequest::Leader => bincode::serialize(&served.leader_view(group)?),
        PeerRequest::List(request) => bincode::serialize(&served.list(group, &request).await?),
        PeerRequest::Handoff(role) => {
            served.handoff(group, role)?;
            bincode::serialize(&())
        }
        PeerRequest::Hello(_) => return Err(ServeError::HelloAfterOpen),
    };
    Ok(encoded?)
}
