//! The API's open connections, at most a cap at once, so a flood of slow clients cannot take
//! every file descriptor or grow memory without bound, and a normal client is still served: when
//! a new connection comes at the cap, the oldest connection that has not been answering for
//! [`MIN_IDLE`] (still sending its headers or body, or idle between requests) is closed to make
//! room. A connection whose request is being carried out or whose answer is being written is
//! never closed; while no connection can be closed, the server stops accepting (new clients wait
//! in the socket's backlog) until one can.
//!
//! Firecracker serves its API one connection at a time (micro-http). Osprey's clients are few (an
//! orchestrator and its SDK's connection pool, a metrics scraper, `osprey api`) but may come in
//! bursts (tests send 200 requests at once); its cap ([`super::server::MAX_CONNECTIONS`], 256)
//! holds such a burst without closing anything, bounds the API's memory to a few MiB and its
//! descriptors well below the default limit of 1,024 that the rest of the VMM shares.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify};

/// How long a connection must have been without a request being answered before it may be
/// closed to make room: a client that connected a moment ago and is about to write its request
/// is left alone.
pub const MIN_IDLE: Duration = Duration::from_millis(10);

/// The table of open connections, shared by the accept loop and each connection's task.
#[derive(Debug)]
pub struct Connections {
    cap: usize,
    table: Mutex<Table>,
    /// Rung when a connection closes or stops being busy (room may have been made).
    changed: Notify,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    /// By age: the smallest id is the oldest.
    open: BTreeMap<u64, Entry>,
    /// Most connections open at once since the last [`Connections::take_peak`].
    peak: usize,
}

#[derive(Debug)]
struct Entry {
    /// A request of it is being carried out, or its answer written.
    busy: bool,
    /// Since when it has not been busy.
    idle_since: Instant,
    /// Tells its task to close it.
    close: Option<oneshot::Sender<()>>,
}

impl Connections {
    /// At most `cap` connections (at least one).
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap: cap.max(1),
            table: Mutex::new(Table::default()),
            changed: Notify::new(),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether one more can be admitted at `now`: under the cap, or one open has been idle for
    /// [`MIN_IDLE`].
    pub fn can_admit(&self, now: Instant) -> bool {
        let table = self.table();
        table.open.len() < self.cap || table.closable(now).is_some()
    }

    /// When at the cap with nothing closable: the moment the first idle connection becomes
    /// closable (`None`: none is idle; wait for [`Connections::changed`]).
    pub fn closable_at(&self) -> Option<Instant> {
        let table = self.table();
        table
            .open
            .values()
            .filter(|e| !e.busy)
            .map(|e| e.idle_since + MIN_IDLE)
            .min()
    }

    /// Resolves when a connection closes or stops being busy.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Admits a new connection, closing the oldest closable one when at the cap; `None` when
    /// none is (the caller should not have accepted: see [`Connections::can_admit`]). The
    /// receiver resolves when the connection is to be closed.
    pub fn admit(self: &Arc<Self>, now: Instant) -> Option<(Slot, oneshot::Receiver<()>)> {
        let mut table = self.table();
        if table.open.len() >= self.cap {
            let oldest = table.closable(now)?;
            if let Some(mut evicted) = table.open.remove(&oldest) {
                if let Some(close) = evicted.close.take() {
                    let _ = close.send(());
                }
            }
        }
        let id = table.next;
        table.next += 1;
        let (close, closed) = oneshot::channel();
        table.open.insert(
            id,
            Entry {
                busy: false,
                idle_since: now,
                close: Some(close),
            },
        );
        table.peak = table.peak.max(table.open.len());
        Some((
            Slot {
                id,
                connections: self.clone(),
            },
            closed,
        ))
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.table().open.len()
    }

    /// The most open at once since the last call, and resets it to those open now.
    pub fn take_peak(&self) -> usize {
        let mut table = self.table();
        let peak = table.peak;
        table.peak = table.open.len();
        peak
    }

    fn set_busy(&self, id: u64, busy: bool) {
        if let Some(entry) = self.table().open.get_mut(&id) {
            entry.busy = busy;
            entry.idle_since = Instant::now();
        }
        if !busy {
            self.changed.notify_one();
        }
    }
}

impl Table {
    /// The oldest connection idle for [`MIN_IDLE`] at `now`.
    fn closable(&self, now: Instant) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, e)| !e.busy && now.saturating_duration_since(e.idle_since) >= MIN_IDLE)
            .map(|(id, _)| *id)
    }
}

/// One admitted connection: its place in the table, given up on drop.
#[derive(Debug)]
pub struct Slot {
    id: u64,
    connections: Arc<Connections>,
}

impl Slot {
    /// Marks the connection busy until the guard is dropped: a request is being carried out
    /// (the guard goes with the answer's body, [`super::body::Guarded`], until it is written).
    pub fn busy(&self) -> Busy {
        self.connections.set_busy(self.id, true);
        Busy {
            id: self.id,
            connections: self.connections.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.table().open.remove(&self.id);
        self.connections.changed.notify_one();
    }
}

/// See [`Slot::busy`].
#[derive(Debug)]
pub struct Busy {
    id: u64,
    connections: Arc<Connections>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.connections.set_busy(self.id, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_idle_connection_is_closed() {
        let c = Connections::new(2);
        let t0 = Instant::now();
        let (a, mut a_closed) = c.admit(t0).expect("a");
        let (b, mut b_closed) = c.admit(t0).expect("b");
        let busy_a = a.busy();
        assert!(!c.can_admit(t0), "b connected a moment ago");
        assert!(c.admit(t0).is_none());
        let later = Instant::now() + MIN_IDLE;
        assert!(c.closable_at().is_some_and(|at| at <= later));
        assert!(c.can_admit(later));
        let (new, _) = c.admit(later).expect("c");
        assert!(a_closed.try_recv().is_err(), "a is busy: kept");
        assert!(b_closed.try_recv().is_ok(), "b was the oldest idle one");
        assert_eq!(c.open(), 2);
        drop(b);
        assert_eq!(c.open(), 2, "b had already left the table");
        let busy_new = new.busy();
        let much_later = later + MIN_IDLE * 10;
        assert!(!c.can_admit(much_later), "every slot busy");
        assert_eq!(c.closable_at(), None);
        drop(busy_a);
        assert!(!c.can_admit(Instant::now()), "a just finished answering");
        assert!(c.can_admit(Instant::now() + MIN_IDLE));
        drop(a);
        assert_eq!(c.open(), 1);
        assert_eq!(c.take_peak(), 2);
        assert_eq!(c.take_peak(), 1);
        drop(busy_new);
    }
}
