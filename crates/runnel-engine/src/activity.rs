//! Which streams moved: the feed the subscription delivery of this node
//! reads while it leads the control group. Every group's applier records
//! the names of the streams an entry changed (appended to, created,
//! closed, deleted); the reader takes them in batches. Nothing is
//! recorded while nobody watches, so the write path pays one atomic load.
//!
//! The feed is a hint: a name taken here says "look at this stream's
//! tail", and the subscription layer reconciles against applied state, so
//! a name missed (before watching began) delays work, never loses it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Default)]
pub struct Activity {
    watching: AtomicBool,
    changed: Mutex<HashSet<Arc<str>>>,
    notify: Notify,
}

impl Activity {
    /// Starts or stops recording (stopping forgets what was recorded).
    pub fn watch(&self, on: bool) {
        self.watching.store(on, Ordering::Release);
        if !on {
            self.changed.lock().expect("activity lock").clear();
        }
    }

    pub fn watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    /// Records streams that changed, and wakes the reader.
    pub fn record(&self, names: impl IntoIterator<Item = Arc<str>>) {
        let mut changed = self.changed.lock().expect("activity lock");
        let before = changed.len();
        changed.extend(names);
        if changed.len() > before {
            drop(changed);
            self.notify.notify_one();
        }
    }

    /// The streams that changed since the last call.
    pub fn take(&self) -> HashSet<Arc<str>> {
        std::mem::take(&mut *self.changed.lock().expect("activity lock"))
    }

    /// Resolves once something is recorded (or was, since the last take).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }

    /// Wakes the reader without a stream (a subscription changed).
    pub fn kick(&self) {
        self.notify.notify_one();
    }
}
