//! Budgets' ledgers kept in a process: what each holds (spent and reserved, nano-dollars) and
//! until when it is kept. The in-memory store's ledgers are these; the Redis store keeps what
//! it last saw of each shared ledger in one, to restore a ledger Redis lost.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

/// Ledgers by name, and the soonest instant one of them may be dropped (its window over):
/// they are swept then, not on every booking.
#[derive(Debug, Default)]
pub struct LedgerBook {
    by_name: HashMap<Arc<str>, Ledger>,
    sweep_at: Option<Instant>,
}

/// One budget window's ledger.
#[derive(Clone, Copy, Debug)]
struct Ledger {
    held: u64,
    until: Instant,
}

impl LedgerBook {
    /// Drops the ledgers kept past `now`, when one may be.
    pub fn sweep(&mut self, now: Instant) {
        if self.sweep_at.is_some_and(|t| t <= now) {
            self.by_name.retain(|_, l| l.until > now);
            self.sweep_at = self.by_name.values().map(|l| l.until).min();
        }
    }

    /// What ledger `name` holds (nothing when it is not kept).
    pub fn held(&self, name: &str) -> u64 {
        self.by_name.get(name).map_or(0, |l| l.held)
    }

    /// Adds `amount` to ledger `name`, kept until `until` at least.
    pub fn book(&mut self, name: &Arc<str>, amount: u64, until: Instant) {
        let held = self.held(name).saturating_add(amount);
        self.set(name, held, until);
    }

    /// Ledger `name` holds `held`, kept until `until` at least.
    pub fn set(&mut self, name: &Arc<str>, held: u64, until: Instant) {
        let l = self
            .by_name
            .entry(name.clone())
            .or_insert(Ledger { held: 0, until });
        l.held = held;
        l.until = l.until.max(until);
        self.sweep_at = Some(self.sweep_at.map_or(until, |t| t.min(until)));
    }

    /// Ledger `name` holds `held` now, if it is kept.
    pub fn update(&mut self, name: &str, held: u64) {
        if let Some(l) = self.by_name.get_mut(name) {
            l.held = held;
        }
    }

    /// Gives back (`back > 0`) or charges (`< 0`) ledger `name`, if it is kept (a ledger gone,
    /// its window over, has nothing to give back to).
    pub fn settle(&mut self, name: &str, back: i64) {
        if let Some(l) = self.by_name.get_mut(name) {
            l.held = if back >= 0 {
                l.held.saturating_sub(back.unsigned_abs())
            } else {
                l.held.saturating_add(back.unsigned_abs())
            };
        }
    }

    /// The names of the ledgers kept.
    #[cfg(test)]
    pub(crate) fn names(&self) -> Vec<Arc<str>> {
        self.by_name.keys().cloned().collect()
    }
}
