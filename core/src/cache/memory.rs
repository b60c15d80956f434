//! The in-memory backend: this process only, gone with it (tests, short scripts).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::store::{Key, Store, Stored};
use crate::error::Result;

/// Entries in a map, with their order of storing so the oldest go first past the bound.
#[derive(Debug)]
pub(crate) struct MemoryStore {
    max_entries: u64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Key, (Stored, u64)>,
    /// Storing order → key.
    order: BTreeMap<u64, Key>,
    next: u64,
}

impl MemoryStore {
    pub(crate) fn new(max_entries: u64) -> Self {
        MemoryStore {
            max_entries,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &Key, now_ms: i64) -> Result<Option<Stored>> {
        let mut inner = self.lock();
        match inner.entries.get(key) {
            Some((stored, _)) if stored.expires_at_ms > now_ms => Ok(Some(stored.clone())),
            Some(&(_, seq)) => {
                inner.entries.remove(key);
                inner.order.remove(&seq);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn put(&self, key: &Key, entry: Stored) -> Result<()> {
        let mut inner = self.lock();
        let seq = inner.next;
        inner.next += 1;
        if let Some((_, old)) = inner.entries.insert(*key, (entry, seq)) {
            inner.order.remove(&old);
        }
        inner.order.insert(seq, *key);
        while inner.entries.len() as u64 > self.max_entries {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            inner.entries.remove(&oldest);
        }
        Ok(())
    }

    async fn len(&self) -> Result<u64> {
        Ok(self.lock().entries.len() as u64)
    }

    async fn clear(&self) -> Result<()> {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.order.clear();
        Ok(())
    }

    fn describe(&self) -> &str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(v: &str, at: i64, until: i64) -> Stored {
        Stored {
            value: v.as_bytes().to_vec(),
            stored_at_ms: at,
            expires_at_ms: until,
        }
    }

    #[tokio::test]
    async fn round_trip_expiry_replace_and_bound() {
        let store = MemoryStore::new(2);
        let (a, b, c) = (Key([1; 32]), Key([2; 32]), Key([3; 32]));
        store.put(&a, stored("a", 0, 100)).await.unwrap();
        assert_eq!(store.get(&a, 99).await.unwrap(), Some(stored("a", 0, 100)));
        assert_eq!(
            store.get(&a, 100).await.unwrap(),
            None,
            "expired at its time"
        );
        assert_eq!(
            store.len().await.unwrap(),
            0,
            "an expired entry is dropped when seen"
        );
        store.put(&a, stored("a", 0, 100)).await.unwrap();
        store.put(&b, stored("b", 1, 100)).await.unwrap();
        store.put(&a, stored("a2", 2, 100)).await.unwrap();
        store.put(&c, stored("c", 3, 100)).await.unwrap();
        // b is now the oldest stored (a was stored again after it).
        assert_eq!(store.get(&b, 5).await.unwrap(), None);
        assert_eq!(store.get(&a, 5).await.unwrap().unwrap().value, b"a2");
        assert!(store.get(&c, 5).await.unwrap().is_some());
        assert_eq!(store.len().await.unwrap(), 2);
        store.clear().await.unwrap();
        assert_eq!(store.len().await.unwrap(), 0);
    }
}
