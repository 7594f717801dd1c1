//! The API's open connections, at most a cap at once, so a flood of slow clients cannot take
//! every file descriptor or grow memory without bound, and a normal client is still served: when
//! a new connection comes at the cap, the oldest connection that is not being answered (still
//! sending its headers or body, or idle between requests) is closed to make room. Connections
//! whose request is being carried out are never closed; if every slot holds one, the server stops
//! accepting until one finishes (new clients wait in the socket's backlog).
//!
//! Firecracker serves its API one connection at a time (micro-http); Osprey answers from a
//! handful of clients at once (an orchestrator, a metrics scraper, `osprey api`), so its cap
//! ([`super::server::MAX_CONNECTIONS`]) is well above what they need and well below the
//! default descriptor limit of 1,024 the rest of the VMM shares.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Notify};

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
    /// A request of it is being carried out.
    busy: bool,
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

    /// Whether one more can be admitted: under the cap, or one open is not busy.
    pub fn can_admit(&self) -> bool {
        let table = self.table();
        table.open.len() < self.cap || table.open.values().any(|e| !e.busy)
    }

    /// Resolves when a connection closes or stops being busy.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Admits a new connection, closing the oldest one not busy when at the cap; `None` when
    /// every slot is busy (the caller should not have accepted: see [`Connections::can_admit`]).
    /// The receiver resolves when the connection is to be closed.
    pub fn admit(self: &Arc<Self>) -> Option<(Slot, oneshot::Receiver<()>)> {
        let mut table = self.table();
        if table.open.len() >= self.cap {
            let oldest_idle = table
                .open
                .iter()
                .find(|(_, e)| !e.busy)
                .map(|(id, _)| *id)?;
            if let Some(mut evicted) = table.open.remove(&oldest_idle) {
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
        }
        if !busy {
            self.changed.notify_one();
        }
    }
}

/// One admitted connection: its place in the table, given up on drop.
#[derive(Debug)]
pub struct Slot {
    id: u64,
    connections: Arc<Connections>,
}

impl Slot {
    /// Marks the connection busy until the guard is dropped: a request is being carried out.
    pub fn busy(&self) -> Busy<'_> {
        self.connections.set_busy(self.id, true);
        Busy(self)
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
pub struct Busy<'a>(&'a Slot);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.connections.set_busy(self.0.id, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_idle_connection_is_closed() {
        let c = Connections::new(2);
        let (a, mut a_closed) = c.admit().expect("a");
        let (b, mut b_closed) = c.admit().expect("b");
        let busy_a = a.busy();
        assert!(c.can_admit());
        let (_c, _) = c.admit().expect("c");
        assert!(a_closed.try_recv().is_err(), "a is busy: kept");
        assert!(b_closed.try_recv().is_ok(), "b was the oldest idle one");
        assert_eq!(c.open(), 2);
        drop(b);
        assert_eq!(c.open(), 2, "b had already left the table");
        let _busy_c = _c.busy();
        assert!(!c.can_admit(), "every slot busy");
        assert!(c.admit().is_none());
        drop(busy_a);
        assert!(c.can_admit());
        drop(a);
        assert_eq!(c.open(), 1);
        assert_eq!(c.take_peak(), 2);
        assert_eq!(c.take_peak(), 1);
    }
}
