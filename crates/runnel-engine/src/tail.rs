//! Tail notification: how a commit wakes the readers waiting on a stream.
//!
//! Each stream with waiting readers has one `watch` channel holding a
//! version counter. A commit bumps the counter once per changed stream, so
//! the cost of a commit is one store and one wake per stream, however many
//! readers wait on it; each reader then reads from its own position.
//! Channels without receivers are dropped on the next notification.

use std::collections::HashMap;
use std::sync::Mutex;

use runnel_core::StreamId;
use tokio::sync::watch;

#[derive(Default)]
pub struct TailNotifier {
    channels: Mutex<HashMap<StreamId, watch::Sender<u64>>>,
}

impl TailNotifier {
    pub fn subscribe(&self, id: StreamId) -> watch::Receiver<u64> {
        let mut channels = self.channels.lock().expect("tail lock");
        channels
            .entry(id)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// Wakes the readers of every changed stream.
    pub fn notify(&self, changed: &[StreamId]) {
        if changed.is_empty() {
            return;
        }
        let mut channels = self.channels.lock().expect("tail lock");
        for id in changed {
            if let Some(tx) = channels.get(id) {
                if tx.receiver_count() == 0 {
                    channels.remove(id);
                } else {
                    tx.send_modify(|v| *v = v.wrapping_add(1));
                }
            }
        }
    }

    /// Streams with a live channel (for tests and metrics).
    pub fn watched(&self) -> usize {
        let mut channels = self.channels.lock().expect("tail lock");
        channels.retain(|_, tx| tx.receiver_count() > 0);
        channels.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_notification_wakes_every_reader_of_the_stream() {
        let tails = TailNotifier::default();
        let mut readers: Vec<_> = (0..100).map(|_| tails.subscribe(7)).collect();
        let mut other = tails.subscribe(8);
        tails.notify(&[7]);
        for r in &mut readers {
            assert!(r.has_changed().unwrap());
            r.borrow_and_update();
        }
        assert!(!other.has_changed().unwrap());
        other.borrow_and_update();
        drop(readers);
        drop(other);
        assert_eq!(tails.watched(), 0);
    }
}
