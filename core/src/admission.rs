//! Who goes next: one rule, stated once.
//!
//! **A waiter of higher [`Priority`] goes before every waiter of lower priority** (an
//! interactive request before the bulk ones). **Among waiters of one priority, [`Tenant`]s
//! take turns**: the next is the first tenant, in name order, after the one served last in that
//! priority, wrapping round, that has someone waiting (an idle tenant never holds a turn up);
//! **within a tenant, the one waiting longest** goes first.
//!
//! The rule has three faces:
//!
//! - **The limiter's waiters.** An interactive request books its slot at once, however far
//!   ahead (booked slots are served in booking order, in this process and, through a shared
//!   store, in every process). A bulk request books only a slot it can use at once; until
//!   then it waits in its key's line in this process, in the order above, and only the first
//!   of the line asks the store. So an interactive request that arrives while a bulk batch
//!   saturates the same quota is admitted at the next free slot, before every bulk request
//!   not yet sent — in every process that shares the quota, since no bulk request holds a
//!   slot ahead of time. Where the limits are unknown (nothing configured, nothing stated)
//!   there is nothing to wait for and no line.
//! - **The job queue's claim** (the queue wing, `llm_failover_queue::Queue::claim`): the same
//!   rule in SQL, over the jobs eligible now — the interactive lane first, a tenant cursor per
//!   priority, the longest-eligible job of the tenant.
//! - **The batch runner**: [`Runner`](crate::batch::Runner)'s items are bulk; the batch on the
//!   queue (`llm_failover_queue::QueuedJob`) claims in that order and sends each item with its
//!   job's priority and tenant.
//!
//! A request's place in the order is set with [`RequestOptions::priority`] and
//! [`RequestOptions::tenant`]; the default is an interactive request of the default tenant.
//!
//! [`RequestOptions::priority`]: crate::RequestOptions::priority
//! [`RequestOptions::tenant`]: crate::RequestOptions::tenant
//!
//! # Examples
//!
//! ```
//! use llm_failover::admission::{Priority, Tenant};
//! use llm_failover::RequestOptions;
//!
//! assert!(Priority::Interactive < Priority::Bulk); // goes first
//! let nightly = RequestOptions::new().priority(Priority::Bulk).tenant(Tenant::new("acme"));
//! # let _ = nightly;
//! assert_eq!("bulk".parse::<Priority>().unwrap(), Priority::Bulk);
//! assert_eq!(Tenant::default().as_str(), "default");
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};

/// How urgent a request or a job is: every interactive one goes before any bulk one.
///
/// Ordered by urgency: `Interactive < Bulk` (the lesser goes first).
///
/// # Examples
///
/// ```
/// use llm_failover::admission::Priority;
///
/// assert_eq!(Priority::default(), Priority::Interactive);
/// assert_eq!(Priority::Bulk.as_str(), "bulk");
/// assert_eq!("interactive".parse::<Priority>().unwrap(), Priority::Interactive);
/// assert!("urgent".parse::<Priority>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Someone is waiting for the answer: admitted at the next free slot, claimed first.
    #[default]
    Interactive,
    /// Batch work: takes the slots no interactive request wants.
    Bulk,
}

impl Priority {
    /// Every priority, most urgent first.
    pub const ALL: [Priority; 2] = [Priority::Interactive, Priority::Bulk];

    /// Its name (`interactive`, `bulk`), as a job queue stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Bulk => "bulk",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = Error;

    fn from_str(s: &str) -> Result<Priority> {
        match s {
            "interactive" => Ok(Priority::Interactive),
            "bulk" => Ok(Priority::Bulk),
            other => Err(Error::new(
                ErrorKind::Config,
                format!("unknown priority {other:?} (expected \"interactive\" or \"bulk\")"),
            )),
        }
    }
}

/// The unit of fairness: whose work it is. Tenants of one priority take turns.
///
/// A tenant is a name only: it spends no quota of its own (an account of its own is a
/// [credential](crate::RequestOptions::credential) and its
/// [account](crate::RequestOptions::account)).
///
/// # Examples
///
/// ```
/// use llm_failover::admission::Tenant;
///
/// let acme = Tenant::new("acme");
/// assert_eq!(acme.as_str(), "acme");
/// assert_eq!(acme.to_string(), "acme");
/// assert_eq!(Tenant::from("acme"), acme);
/// assert!(Tenant::new("acme") < Tenant::new("globex")); // turns go in name order
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// The tenant named `name`.
    pub fn new(name: impl AsRef<str>) -> Self {
        Tenant(Arc::from(name.as_ref()))
    }

    /// Its name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The tenant of work that names none: `default`.
impl Default for Tenant {
    fn default() -> Self {
        Tenant::new("default")
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Tenant {
    fn from(name: &str) -> Self {
        Tenant::new(name)
    }
}

impl From<String> for Tenant {
    fn from(name: String) -> Self {
        Tenant(Arc::from(name))
    }
}

impl PartialEq<str> for Tenant {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Tenant {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl AsRef<str> for Tenant {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The tenant whose turn it is among `waiting` (in name order, without repeats): the first
/// after `last`, the one served last, wrapping round; `None` when nobody waits.
pub(crate) fn next_tenant<'a, T: Ord + ?Sized>(
    waiting: impl IntoIterator<Item = &'a T> + Clone,
    last: Option<&T>,
) -> Option<&'a T> {
    let first = waiting.clone().into_iter().next();
    match last {
        None => first,
        Some(last) => waiting.into_iter().find(|t| *t > last).or(first),
    }
}

/// A request's place in the order: its priority and tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) priority: Priority,
    pub(crate) tenant: Tenant,
}

/// The waiters of one key in this process, in the order of the rule: the first asks the
/// store, the others wait for their turn (a notification each, no polling).
#[derive(Debug, Default)]
pub(crate) struct Line {
    state: Mutex<LineState>,
}

#[derive(Debug, Default)]
struct LineState {
    /// Who waits, by priority and tenant, longest first.
    waiting: BTreeMap<(Priority, Tenant), VecDeque<u64>>,
    /// The tenant served last in each priority.
    last: HashMap<Priority, Tenant>,
    /// The waiter whose turn it is (woken when it was given the turn).
    first: Option<u64>,
    wakers: HashMap<u64, Arc<Notify>>,
    next_id: u64,
    /// The instant the store last said the key frees up (a new first waits for it before
    /// asking: the store would only say it again).
    free_at: Option<Instant>,
    /// The turn a shared store promised this line (its number), for the next ask.
    promise: Option<u64>,
    /// The last grant, and whether others waited behind it: then the time to the next grant
    /// was continuous service.
    last_grant: Option<(Instant, bool)>,
    /// The times between grants of continuous service, the last [`GAPS`]; the shortest is
    /// one slot. A gate or a wait for a slow store between two grants is longer than a slot,
    /// and an idle spell (the line empty, its items snoozed) is not service at all: taken for
    /// a slot, either would make the line's estimate grow with every snooze it causes.
    gaps: VecDeque<Duration>,
}

/// How many intervals between grants a line remembers.
const GAPS: usize = 8;

impl LineState {
    /// A slot was granted to the first at `at`: the time since the last grant is one slot's
    /// interval only if others waited behind that one.
    fn granted(&mut self, at: Instant) {
        if let Some((prev, true)) = self.last_grant {
            if self.gaps.len() == GAPS {
                self.gaps.pop_front();
            }
            self.gaps.push_back(at.saturating_duration_since(prev));
        }
        self.last_grant = Some((at, !self.waiting.is_empty()));
    }

    /// The time one slot takes: the shortest interval of continuous service seen lately.
    fn slot(&self) -> Duration {
        self.gaps.iter().min().copied().unwrap_or_default()
    }

    /// How many wait, the first included.
    fn len(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum::<usize>() + usize::from(self.first.is_some())
    }

    /// Gives the turn to the next waiter by the rule, if nobody has it.
    fn hand_on(&mut self) {
        if self.first.is_some() {
            return;
        }
        let Some(priority) = Priority::ALL
            .into_iter()
            .find(|p| self.waiting.keys().any(|(q, _)| q == p))
        else {
            return;
        };
        let tenants: Vec<&Tenant> = self
            .waiting
            .keys()
            .filter(|(q, _)| *q == priority)
            .map(|(_, t)| t)
            .collect();
        let Some(tenant) = next_tenant(tenants.iter().copied(), self.last.get(&priority)).cloned()
        else {
            return;
        };
        let slot = (priority, tenant);
        let queue = self.waiting.get_mut(&slot).expect("a tenant that waits");
        let id = queue
            .pop_front()
            .expect("a tenant's queue is never left empty");
        if queue.is_empty() {
            self.waiting.remove(&slot);
        }
        self.last.insert(priority, slot.1);
        let waker = self.wakers.remove(&id).expect("every waiter has a waker");
        waker.notify_one();
        self.first = Some(id);
    }

    fn leave(&mut self, id: u64) {
        if self.first == Some(id) {
            self.first = None;
        } else if self.wakers.remove(&id).is_some() {
            self.waiting.retain(|_, q| {
                q.retain(|w| *w != id);
                !q.is_empty()
            });
        }
        self.hand_on();
    }
}

impl Line {
    /// Joins the line at `place`: the turn comes through [`Waiter::turn`], and goes on to the
    /// next when the waiter is dropped.
    pub(crate) fn join(self: &Arc<Self>, place: &Place) -> Waiter {
        let mut s = self.lock();
        let id = s.next_id;
        s.next_id += 1;
        let waker = Arc::new(Notify::new());
        s.wakers.insert(id, waker.clone());
        s.waiting
            .entry((place.priority, place.tenant.clone()))
            .or_default()
            .push_back(id);
        s.hand_on();
        Waiter {
            line: self.clone(),
            id,
            waker,
        }
    }

    /// How many wait, the first included.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// When the store last said the key frees up.
    pub(crate) fn free_at(&self) -> Option<Instant> {
        self.lock().free_at
    }

    /// When a waiter joining now may expect its turn to send: after the instant the store
    /// last named and one slot per waiter ahead; `None` when nobody waits and nothing is
    /// known to be closed (the store is asked at once).
    pub(crate) fn expected_turn(&self, now: Instant) -> Option<Instant> {
        let s = self.lock();
        let ahead = s.len();
        let free = s.free_at.filter(|f| *f > now);
        if ahead == 0 && free.is_none() {
            return None;
        }
        let slots = u32::try_from(ahead).unwrap_or(u32::MAX);
        Some(free.unwrap_or(now) + s.slot().saturating_mul(slots))
    }

    /// A slot was granted to the first at `at`.
    pub(crate) fn granted(&self, at: Instant) {
        self.lock().granted(at);
    }

    /// Notes when the store says the key frees up.
    pub(crate) fn set_free_at(&self, at: Instant) {
        self.lock().free_at = Some(at);
    }

    /// Notes the turn a shared store promised this line, at `at`: the next ask waits for it
    /// and hands its number back.
    pub(crate) fn promised(&self, number: u64, at: Instant) {
        let mut s = self.lock();
        s.free_at = Some(at);
        s.promise = Some(number);
    }

    /// The promised turn's number, taken for an ask.
    pub(crate) fn take_promise(&self) -> Option<u64> {
        self.lock().promise.take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LineState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A place in a [`Line`]; leaving (drop) hands the turn on.
#[derive(Debug)]
pub(crate) struct Waiter {
    line: Arc<Line>,
    id: u64,
    waker: Arc<Notify>,
}

impl Waiter {
    /// Resolves once it is this waiter's turn (at once if it is already).
    pub(crate) async fn turn(&self) {
        loop {
            let notified = self.waker.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_first() {
                return;
            }
            notified.await;
        }
    }

    fn is_first(&self) -> bool {
        self.line.lock().first == Some(self.id)
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.line.lock().leave(self.id);
    }
}

/// The order a line serves `places` in when all wait at once and no tenant was served yet:
/// indexes into `places` (the rule's table, for its other faces to be checked against).
pub(crate) fn serve_order(places: &[Place]) -> Vec<usize> {
    let mut s = LineState::default();
    for (i, p) in places.iter().enumerate() {
        let id = i as u64;
        s.wakers.insert(id, Arc::new(Notify::new()));
        s.waiting
            .entry((p.priority, p.tenant.clone()))
            .or_default()
            .push_back(id);
    }
    let mut order = Vec::new();
    loop {
        s.hand_on();
        let Some(id) = s.first.take() else {
            return order;
        };
        order.push(id as usize);
    }
}

/// The lines of every key that has bulk waiters in this process.
#[derive(Debug)]
pub(crate) struct Lines<K> {
    lines: Mutex<HashMap<K, Arc<Line>>>,
}

impl<K> Default for Lines<K> {
    fn default() -> Self {
        Lines {
            lines: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Lines<K> {
    /// The line of `key`.
    pub(crate) fn of(&self, key: &K) -> Arc<Line> {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = lines.get(key) {
            return l.clone();
        }
        // Lines nobody waits in any more go when a new one is made: as many as keys in use.
        // Every waiter holds its line: one held by this map alone has nobody in it.
        lines.retain(|_, l| Arc::strong_count(l) > 1);
        lines.entry(key.clone()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_take_turns_in_name_order_wrapping_and_skipping_the_idle() {
        let table: &[(&[&str], Option<&str>, Option<&str>)] = &[
            (&[], None, None),
            (&[], Some("b"), None),
            (&["a", "b", "c"], None, Some("a")),
            (&["a", "b", "c"], Some("a"), Some("b")),
            (&["a", "b", "c"], Some("c"), Some("a")),
            // The last served is idle now: the next after it still.
            (&["a", "c"], Some("b"), Some("c")),
            (&["a"], Some("a"), Some("a")),
            (&["b"], Some("z"), Some("b")),
        ];
        for (waiting, last, expected) in table {
            let got = next_tenant(waiting.iter().copied(), *last);
            assert_eq!(got, *expected, "waiting {waiting:?}, last {last:?}");
        }
    }

    fn place(priority: Priority, tenant: &str) -> Place {
        Place {
            priority,
            tenant: Tenant::new(tenant),
        }
    }

    /// The order a line serves `arrivals` in (each waits from the start; the first takes
    /// its turn and leaves, then the next).
    async fn served(arrivals: &[(Priority, &str)]) -> Vec<String> {
        let line = Arc::new(Line::default());
        let mut waiters: Vec<(String, Waiter)> = arrivals
            .iter()
            .enumerate()
            .map(|(i, (p, t))| (format!("{t}{i}"), line.join(&place(*p, t))))
            .collect();
        let mut order = Vec::new();
        while !waiters.is_empty() {
            let first = waiters
                .iter()
                .position(|(_, w)| w.is_first())
                .expect("someone has the turn");
            let (name, w) = waiters.remove(first);
            w.turn().await;
            order.push(name);
            drop(w);
        }
        order
    }

    #[tokio::test]
    async fn a_line_serves_interactive_first_then_tenants_in_turn_then_the_longest_waiting() {
        use Priority::{Bulk, Interactive};
        // The first to arrive has the turn at once; the rule orders the rest.
        type Arrivals<'a> = &'a [(Priority, &'a str)];
        let table: &[(Arrivals<'_>, &[&str])] = &[
            (
                &[(Bulk, "a"), (Bulk, "a"), (Bulk, "a")],
                &["a0", "a1", "a2"],
            ),
            (
                &[
                    (Bulk, "a"),
                    (Bulk, "a"),
                    (Bulk, "a"),
                    (Bulk, "b"),
                    (Bulk, "c"),
                ],
                &["a0", "b3", "c4", "a1", "a2"],
            ),
            (
                &[(Bulk, "a"), (Bulk, "b"), (Interactive, "z"), (Bulk, "a")],
                &["a0", "z2", "b1", "a3"],
            ),
        ];
        for (arrivals, expected) in table {
            assert_eq!(&served(arrivals).await, expected, "{arrivals:?}");
        }
    }

    /// Found by the four-process gate test: a line whose items were snoozed came back after
    /// the snooze, and the first grant then measured the whole idle spell as one slot; every
    /// waiter's expected turn grew by it, so they were snoozed longer, and the next grant
    /// measured a longer spell still. Only continuous service measures a slot, and a gate
    /// inside it does not stretch the slot (the shortest interval is kept).
    #[test]
    fn a_slot_is_measured_only_by_continuous_service_and_a_gate_or_idle_spell_does_not_stretch_it()
    {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // (grant at ms, others waiting behind it) → the slot after it.
        type Grants<'a> = &'a [(u64, bool)];
        let table: &[(&str, Grants<'_>, Duration)] = &[
            (
                "nobody behind: no slot known",
                &[(0, false), (100, false)],
                ms(0),
            ),
            (
                "continuous service",
                &[(0, true), (100, true), (200, true)],
                ms(100),
            ),
            (
                "an idle spell between a lone grant and a busy one",
                &[(0, true), (100, false), (35_100, true), (35_200, true)],
                ms(100),
            ),
            (
                "a gate inside continuous service",
                &[(0, true), (100, true), (2_100, true), (2_200, true)],
                ms(100),
            ),
            ("only an idle spell", &[(0, false), (60_000, true)], ms(0)),
        ];
        for (case, grants, slot) in table {
            let mut s = LineState::default();
            for &(at, behind) in *grants {
                s.waiting.clear();
                if behind {
                    s.waiting
                        .entry((Priority::Bulk, Tenant::default()))
                        .or_default()
                        .push_back(9);
                }
                s.granted(t0 + ms(at));
            }
            assert_eq!(s.slot(), *slot, "{case}");
        }
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_before_its_turn_is_skipped_and_the_first_leaving_hands_on() {
        let line = Arc::new(Line::default());
        let a = line.join(&place(Priority::Bulk, "t"));
        let b = line.join(&place(Priority::Bulk, "t"));
        let c = line.join(&place(Priority::Bulk, "t"));
        assert_eq!(line.len(), 3);
        drop(b);
        assert!(a.is_first() && !c.is_first());
        drop(a);
        c.turn().await;
        assert_eq!(line.len(), 1);
        drop(c);
        assert_eq!(line.len(), 0);
    }
}
