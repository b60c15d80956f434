//! Values kept once per thread stripe, for counts that every request adds to.
//!
//! A count shared by every request is one cache line that the cores running requests pass
//! back and forth on every addition. Striped, each thread adds to its own line and a reader
//! sums the stripes.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// How many stripes: threads beyond this share stripes.
const STRIPES: usize = 8;

/// One stripe, aligned to two cache lines so that neither a neighbouring stripe nor the
/// adjacent-line prefetcher brings another thread's values in.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// `T` once per stripe.
#[derive(Debug)]
pub(crate) struct Striped<T> {
    stripes: [Padded<T>; STRIPES],
}

impl<T: Default> Default for Striped<T> {
    fn default() -> Self {
        Striped {
            stripes: std::array::from_fn(|_| Padded::default()),
        }
    }
}

impl<T> Striped<T> {
    /// The calling thread's stripe.
    pub(crate) fn here(&self) -> &T {
        &self.stripes[stripe()].0
    }

    /// Every stripe.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.stripes.iter().map(|p| &p.0)
    }
}

/// The calling thread's stripe number, handed out round-robin on its first use.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT.fetch_add(1, Relaxed) % STRIPES;
            s.set(i);
        }
        i
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn threads_add_to_their_own_stripe_and_the_sum_is_every_addition() {
        let striped: Arc<Striped<AtomicU64>> = Arc::default();
        let threads: Vec<_> = (0..12)
            .map(|_| {
                let s = striped.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        s.here().fetch_add(1, Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a thread");
        }
        let sum: u64 = striped.iter().map(|a| a.load(Relaxed)).sum();
        assert_eq!(sum, 12_000);
        // Twelve threads over eight stripes: more than one stripe was used.
        assert!(striped.iter().filter(|a| a.load(Relaxed) > 0).count() > 1);
    }

    #[test]
    fn a_stripe_is_two_cache_lines() {
        assert_eq!(std::mem::align_of::<Padded<AtomicU64>>(), 128);
        assert_eq!(std::mem::size_of::<Striped<AtomicU64>>(), 128 * STRIPES);
    }
}
