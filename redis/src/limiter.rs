//! [`RedisStore`]: the limiter's state shared by every process on one quota, in Redis.
//!
//! Each operation of [`LimiterStore`] is one call of one Lua script
//! (`limiter.lua`, a rule-for-rule port of the in-memory model: configured ceilings,
//! stated buckets whose windows are learned from the resets, stated remaining as the truth
//! less what is booked and unanswered, targeted drains, the gate, the pace learned from 429s).
//! So, across processes:
//!
//! * **Reservation**: each caller books its own future slot in one atomic call and sleeps
//!   locally until it — first come, first served, without polling; a request larger than a
//!   bucket is refused and books nothing; refunds are capped at the capacity.
//! * **Time** is Redis's own (`TIME`, integer microseconds), never a host's: hosts whose
//!   clocks disagree still agree on every bucket. Instants cross the wire as durations from
//!   the script's now.
//! * **The gate** only ever moves later (`max`), so an older, shorter cooldown never shortens
//!   a newer, longer one; a 429 or an opened breaker seen by one process stops them all until
//!   the stated reset.
//! * **Slots booked ahead** (a paced request sleeping until its slot) do not go during a gate
//!   another process raised meanwhile: every new gate is announced on `<prefix>:gates`
//!   (`PUBLISH` from the script), each store listens, and a slot booked ahead is re-checked in
//!   Redis before it is sent only when its key had an announcement since it was booked — or
//!   when the store was not listening all along (then always). Between a gate and its
//!   announcement's delivery (well under a millisecond on loopback) a slot can still go.
//! * **One half-open probe across all processes**: after a gate, the first reservation takes
//!   a token (`SET …:probe <booking> NX PX`); the others look again every 250 ms until its
//!   answer releases it by compare-and-delete (or the token expires, [`PROBE_TTL`], if its
//!   process died).
//! * **One call per attempt**: an answer's report and token reconciliation are held back and
//!   travel with the next call on their key (applied at their own time), or go within 250 ms;
//!   a gate, a drain, a probe's answer go at once. A state Redis lost starts again from the
//!   last report this store heard, not from "unknown, admit freely".
//! * **Bulk lines take promised turns** (`turn`): a bulk ask that cannot go now is promised the
//!   instant the key can pay for it after the turns promised before it, so the lines of several
//!   processes do not all ask at once; a promise books nothing (interactive requests come first).
//! * **Keys**: `<prefix>:{<provider>|<model>|<account>}:limits` and `…:probe`, one hash tag per
//!   (provider, model, account) so a call is atomic and Redis Cluster routes it; the state
//!   expires two days after its last write. Nothing secret is written: no key, no prompt —
//!   provider, model and account names, numbers and times only.
//! * **Redis down or slow** (a call over [`SharedSettings::timeout`]) is a mode, not an
//!   accident ([`WhenDown`]): fail closed (nothing admitted; requests wait within their
//!   deadline, then end retryable) or a local share of the configured limits, which starts
//!   from the lower of what this process had left of it and its part of the shared levels at
//!   its last grant (each grant answers with them), never full. A warning says
//!   so once per outage; Redis is tried again every [`SharedSettings::retry_interval`] and
//!   used again as soon as it answers.
//!
//! The client is the `redis` crate's connection manager for one Redis, or its cluster
//! connection for a Redis Cluster ([`SharedSettings::cluster`]: each call goes to the primary
//! that owns its key's hash tag), made again after an outage, and its [`Script`] (`EVALSHA`,
//! loading the script again after a `NOSCRIPT`); no pool. TLS (`rediss://`) either way.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use crate::connect::{Conn, Source, held_or_new};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use llm_failover_core::error::{Error, ErrorKind, Result};
use llm_failover_core::ratelimit::{
    BucketSnapshot, Charge, Demand, Dimension, LimitKey, LimitReport, LimitSnapshot, LimiterStore,
    Limits, Per, Reservation, SharedSettings, Tightening, Turn, WhenDown, Window,
};
use llm_failover_core::wing::redis::{ConfiguredLevels, LedgerBook, MemoryStore, url};

use crate::connect::config_error;

/// How long a half-open probe holds the other processes back when its answer never comes
/// (its process died): then the next reservation probes.
const PROBE_TTL: Duration = Duration::from_secs(10);

/// While another process's half-open probe is out, a reservation looks again this soon (its
/// answer releases the probe at once), as a local probe in flight is polled.
const PROBE_POLL: Duration = Duration::from_millis(250);

/// How long a key's state outlives its last write: longer than the longest window (a day).
const STATE_TTL: Duration = Duration::from_secs(2 * 86_400);

/// The script: one call per operation.
const SCRIPT: &str = include_str!("limiter.lua");

/// Limits, gates and half-open probes shared through Redis by every process on one quota
/// (the `redis` feature): each [`LimiterStore`] operation one Lua script call, Redis's clock,
/// one hash tag per (provider, model, account), fail closed or a local share while Redis is
/// down ([`WhenDown`]). Turned on by `LLM_FAILOVER_REDIS_URL`, `[shared]` in `providers.toml`
/// or [`ClientBuilder::shared`](llm_failover_core::ClientBuilder::shared).
///
/// # Examples
///
/// ```
/// use llm_failover::ratelimit::SharedSettings;
/// use llm_failover::redis::RedisStore;
///
/// // Connects on first use; building it checks the URL only.
/// let store = RedisStore::new(SharedSettings::new("redis://127.0.0.1:6379"))?;
/// assert!(format!("{store:?}").contains("127.0.0.1:6379"));
/// assert!(RedisStore::new(SharedSettings::new("not a url")).is_err());
/// # Ok::<(), llm_failover::Error>(())
/// ```
pub struct RedisStore {
    inner: Arc<Inner>,
}

/// The store's state, shared with the task that sends the reports it holds back.
struct Inner {
    settings: SharedSettings,
    /// One Redis, or a Redis Cluster ([`SharedSettings::cluster`]).
    source: Source,
    /// The seed node's client, for gate announcements (a cluster's PUBLISH reaches every
    /// node, so one subscription hears them all).
    client: redis::Client,
    /// The connection; dropped when Redis is found down, made again on the next try.
    conn: Mutex<Option<Conn>>,
    script: Script,
    allowance: Duration,
    probe_ttl: Option<Duration>,
    /// Tests: the script's now is this instant's age, not Redis's `TIME`.
    virtual_epoch: Option<Instant>,
    /// The local share used while Redis is down ([`WhenDown::LocalShare`]).
    local: MemoryStore,
    /// Where Redis is taken to be down: the one server (scope `None`), or on a cluster each
    /// target's primary (scope: its state key), so that a dead primary rests its own targets
    /// only and the others go on.
    down: Mutex<HashMap<Option<String>, Down>>,
    /// Gates announced by any process, heard on `<prefix>:gates`.
    gates: Arc<Gates>,
    listening: std::sync::Once,
    /// The state keys this store has seen in Redis: one found missing later was lost (Redis
    /// restarted without it), and is made again with empty buckets, not full ones.
    known: Mutex<std::collections::HashSet<String>>,
    /// What this store last saw each budget's ledger hold: a ledger Redis lost is restored
    /// from it, never started from 0.
    ledgers_seen: Mutex<LedgerBook>,
    /// Reports held back, per state key, to travel with the next call on it ([`LINGER`]).
    held: Mutex<HashMap<String, Held>>,
    /// A send of what is held is scheduled.
    flushing: AtomicBool,
    /// The latest instant a report was held back at: a send in the background is made at
    /// that instant or later (on a virtual clock, the caller's now is not the runtime's).
    held_at: Mutex<Option<Instant>>,
    /// Slots this store booked that are not a half-open probe (state key, booking): only
    /// their answers are held back — a probe's answer releases it for every process at once.
    plain: Mutex<std::collections::HashSet<(String, u64)>>,
    /// The last report told per state key, and when: a state Redis lost (restarted without
    /// it) starts again from it, not from nothing.
    last_report: Mutex<HashMap<String, (LimitReport, Instant)>>,
}

/// Answers' reports held back for one key.
struct Held {
    key: LimitKey,
    /// Each with the instant it was told.
    raises: Vec<(Tightening, Instant)>,
}

/// How long an answer's report (with its token reconciliation) is held back at most, to
/// travel with the next call on its key — the next admission, mostly — rather than in a call
/// of its own: one store call per attempt on the common path. The other processes hear it
/// this much later at worst.
const LINGER: Duration = Duration::from_millis(250);

/// The most reports held back for one key: more are sent at once.
const MAX_HELD: usize = 64;

/// What the gate announcements say, so that a slot booked ahead is re-checked in Redis before
/// it is sent only when a gate was raised on its key since it was booked (or when the
/// announcements may have been missed: not listening, or listening anew since).
#[derive(Debug, Default)]
struct Gates {
    /// Subscribed now.
    healthy: AtomicBool,
    /// Bumped whenever the subscription starts or ends: what was heard before is no proof.
    epoch: AtomicU64,
    /// Announcements heard per state key.
    heard: Mutex<HashMap<String, u64>>,
    /// Slots booked ahead: (state key, booking) → (epoch, announcements heard) then.
    booked: Mutex<HashMap<(String, u64), (u64, u64)>>,
    /// Woken on every change of the above (for tests that wait for an announcement).
    changed: tokio::sync::Notify,
}

/// The most slots booked ahead remembered; beyond it they are all checked in Redis.
const MAX_BOOKED: usize = 65_536;

impl Gates {
    fn snapshot(&self, state: &str) -> (u64, u64) {
        let heard = self.heard.lock().unwrap_or_else(PoisonError::into_inner);
        (
            self.epoch.load(Ordering::Acquire),
            heard.get(state).copied().unwrap_or(0),
        )
    }

    /// What was heard before a reservation is asked for: `None` when not listening (then
    /// its slot, if booked ahead, is checked anyway).
    fn before(&self, state: &str) -> Option<(u64, u64)> {
        self.healthy
            .load(Ordering::Acquire)
            .then(|| self.snapshot(state))
    }

    /// Remembers a slot booked ahead with what was heard before it was asked for: an
    /// announcement that crosses the reservation's answer counts as after it.
    fn booked_ahead(&self, state: &str, booking: u64, before: Option<(u64, u64)>) {
        let Some(before) = before else { return };
        let mut booked = self.booked.lock().unwrap_or_else(PoisonError::into_inner);
        if booked.len() >= MAX_BOOKED {
            booked.clear();
        }
        booked.insert((state.to_owned(), booking), before);
    }

    /// Whether no gate was announced on `state` since `booking` was booked ahead, as far as
    /// this process can be sure (listening all along).
    fn quiet_since(&self, state: &str, booking: u64) -> bool {
        let then = self
            .booked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(state.to_owned(), booking));
        self.healthy.load(Ordering::Acquire) && then == Some(self.snapshot(state))
    }
}

/// Whether Redis is taken to be down, and until when it is not tried again.
#[derive(Debug, Default)]
struct Down {
    next_try: Option<Instant>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on the Redis `settings` name. It connects on first use (and again after
    /// Redis went away); nothing is sent here.
    ///
    /// # Errors
    ///
    /// `Config` when the URL is not a Redis URL (the message names the host at most).
    pub fn new(settings: SharedSettings) -> Result<Self> {
        let host = settings.host();
        let client = crate::connect::client(url(&settings), &settings.tls, "shared limits", &host)?;
        let source = crate::connect::source(
            &client,
            url(&settings),
            &settings.tls,
            settings.cluster,
            settings.timeout,
            "shared limits",
            &host,
        )?;
        let local = MemoryStore::new();
        let inner = Inner {
            source,
            client,
            conn: Mutex::new(None),
            script: Script::new(SCRIPT),
            allowance: Duration::ZERO,
            probe_ttl: Some(PROBE_TTL),
            virtual_epoch: None,
            local,
            down: Mutex::new(HashMap::new()),
            gates: Arc::new(Gates::default()),
            known: Mutex::new(std::collections::HashSet::new()),
            ledgers_seen: Mutex::default(),
            listening: std::sync::Once::new(),
            held: Mutex::new(HashMap::new()),
            flushing: AtomicBool::new(false),
            held_at: Mutex::new(None),
            plain: Mutex::new(std::collections::HashSet::new()),
            last_report: Mutex::new(HashMap::new()),
            settings,
        };
        Ok(RedisStore {
            inner: Arc::new(inner),
        })
    }

    /// The state, to change while the store is being built (nothing else holds it yet).
    fn building(&mut self) -> &mut Inner {
        Arc::get_mut(&mut self.inner).expect("a store being built is not shared yet")
    }

    /// Keeps `allowance` of each bucket's refill in reserve, as the in-memory store does
    /// ([`Policy::latency_allowance`](llm_failover_core::config::Policy)).
    #[must_use]
    pub fn with_latency_allowance(mut self, allowance: Duration) -> Self {
        let inner = self.building();
        inner.allowance = allowance;
        inner.local = MemoryStore::with_latency_allowance(allowance);
        self
    }

    /// Runs the script on the caller's clock (`now - epoch`) instead of Redis's `TIME`: for
    /// tests on a virtual clock.
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    #[allow(dead_code)]
    pub(crate) fn on_virtual_clock(mut self, epoch: Instant) -> Self {
        self.building().virtual_epoch = Some(epoch);
        self
    }

    /// Hands out no half-open probes: for tests that compare this store with the in-memory
    /// one, which has none (its process's breaker is the probe).
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    #[allow(dead_code)]
    pub(crate) fn without_probes(mut self) -> Self {
        self.building().probe_ttl = None;
        self
    }

    /// Whether the gate announcements are being heard now (tests).
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    #[allow(dead_code)]
    pub(crate) fn is_listening(&self) -> bool {
        self.inner.gates.healthy.load(Ordering::Acquire)
    }

    /// How many gate announcements were heard for `key` (tests).
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    #[allow(dead_code)]
    pub(crate) fn announcements(&self, key: &LimitKey) -> u64 {
        self.inner.gates.snapshot(&self.inner.keys(key).0).1
    }

    /// Returns once `ready` holds of this store, woken by each change the listener makes (tests:
    /// waiting for the subscription or an announcement, without polling a clock).
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    #[allow(dead_code)]
    pub(crate) async fn until(&self, ready: impl Fn(&Self) -> bool) {
        loop {
            let changed = self.inner.gates.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if ready(self) {
                return;
            }
            changed.await;
        }
    }
}

impl Inner {
    /// The state's and the probe's keys for `key`.
    fn keys(&self, key: &LimitKey) -> (String, String) {
        let tag = format!(
            "{}|{}|{}",
            escape(key.provider.as_str()),
            escape(&key.model),
            key.account.as_deref().map(escape).unwrap_or_default()
        );
        let prefix = &self.settings.key_prefix;
        (
            format!("{prefix}:{{{tag}}}:limits"),
            format!("{prefix}:{{{tag}}}:probe"),
        )
    }

    /// The key of a budget's ledger (one integer: nano-dollars spent or reserved).
    fn ledger(&self, ledger: &str) -> String {
        format!("{}:budget:{}", self.settings.key_prefix, escape(ledger))
    }

    /// The script's form of `charges`, each with what this store last saw its ledger hold.
    fn wire_charges(&self, charges: &[Charge], now: Instant) -> Vec<WireCharge> {
        let mut seen = self
            .ledgers_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        seen.sweep(now);
        charges
            .iter()
            .map(|c| WireCharge {
                cap: c.cap,
                amount: c.amount,
                keep: u64::try_from(c.keep.as_millis()).unwrap_or(u64::MAX),
                seen: seen.held(&c.ledger),
            })
            .collect()
    }

    /// Notes that `c`'s ledger held `held` at `now`.
    fn saw_ledger(&self, c: &Charge, held: u64, now: Instant) {
        self.ledgers_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set(&c.ledger, held, now + c.keep);
    }

    /// Gives back (> 0) or charges (< 0) nano-dollars in each ledger: one pipelined call,
    /// whose answers (what each ledger holds then) are noted as seen.
    async fn settle(&self, ledgers: &[(Arc<str>, i64)]) -> Result<()> {
        if ledgers.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (ledger, back) in ledgers {
            pipe.cmd("DECRBY").arg(self.ledger(ledger)).arg(*back);
        }
        let timeout = self.settings.timeout;
        let work = async {
            let mut conn = self.connection().await?;
            pipe.query_async::<Vec<i64>>(&mut conn).await
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(Ok(held)) => {
                let mut seen = self
                    .ledgers_seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                for ((name, _), held) in ledgers.iter().zip(held) {
                    seen.update(name, held.max(0).unsigned_abs());
                }
                Ok(())
            }
            Ok(Err(e)) => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "shared limits: Redis at {} could not settle a budget: {e}",
                    self.settings.host()
                ),
            )),
            Err(_) => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "shared limits: Redis at {} did not settle a budget within {timeout:?}",
                    self.settings.host()
                ),
            )),
        }
    }

    /// One call of the script, or `None` while Redis is down (the mode then decides).
    async fn call<T: for<'de> Deserialize<'de>>(
        &self,
        key: &LimitKey,
        op: &str,
        args: &impl Serialize,
        now: Instant,
    ) -> Result<Option<T>> {
        self.call_with(key, op, args, &[], now).await
    }

    /// One call of the script that also names budgets' `ledgers` (keys after the state's
    /// and the probe's), or `None` while Redis is down.
    async fn call_with<T: for<'de> Deserialize<'de>>(
        &self,
        key: &LimitKey,
        op: &str,
        args: &impl Serialize,
        ledgers: &[String],
        now: Instant,
    ) -> Result<Option<T>> {
        let held = self.take_held(key);
        if self.resting(key, now) {
            self.held_to_local(key, held).await?;
            return Ok(None);
        }
        let before: Vec<HeldArgs> = held
            .iter()
            .map(|(t, at)| HeldArgs {
                raise: self.raise_args(t, *at),
                ago: micros(now.saturating_duration_since(*at)),
            })
            .collect();
        match self.invoke(key, op, args, &before, ledgers, now).await {
            Ok(text) => {
                self.up(key, now);
                serde_json::from_str(&text).map(Some).map_err(|e| {
                    Error::new(
                        ErrorKind::Io,
                        format!("shared limits: the limiter script's answer to {op} is not what it should be: {e}"),
                    )
                })
            }
            Err(Failure::Down(why)) => {
                self.went_down(key, now, &why);
                self.held_to_local(key, held).await?;
                Ok(None)
            }
            Err(Failure::Refused(why)) => Err(self.refused(&why)),
            Err(Failure::Script(why)) => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "shared limits: the limiter script failed at Redis {} ({op}): {why}",
                    self.settings.host()
                ),
            )),
        }
    }

    /// Holds `t` back to travel with the next call on `key` (or within [`LINGER`]): an
    /// answer's report and reconciliation, unless another process must hear it at once — a
    /// gate or a drain (a 429, an opened breaker), a report that closes a limit it does not
    /// size (nothing left, no limit stated: a gate until its reset), the answer to a half-open
    /// probe or to a slot this store did not book. Whether it was held.
    fn hold(&self, key: &LimitKey, t: &Tightening, now: Instant) -> bool {
        let closes = t.report.as_ref().is_some_and(|r| {
            [&r.requests, &r.tokens, &r.input_tokens, &r.output_tokens]
                .into_iter()
                .flatten()
                .any(|w| w.remaining == Some(0) && w.limit.is_none_or(|l| l == 0))
        });
        if t.gate_until.is_some() || t.drain.any() || closes {
            return false;
        }
        let state = self.keys(key).0;
        if let Some(booking) = t.booking {
            let mut plain = self.plain.lock().unwrap_or_else(PoisonError::into_inner);
            if !plain.remove(&(state.clone(), booking)) {
                return false;
            }
        }
        self.heard(&state, t, now);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = held.entry(state).or_insert_with(|| Held {
            key: key.clone(),
            raises: Vec::new(),
        });
        if entry.raises.len() >= MAX_HELD {
            return false;
        }
        entry.raises.push((t.clone(), now));
        let mut at = self.held_at.lock().unwrap_or_else(PoisonError::into_inner);
        *at = Some(at.map_or(now, |a| a.max(now)));
        true
    }

    /// Notes a slot this store booked that is not a half-open probe: its answer may be held
    /// back.
    fn booked_plain(&self, state: &str, booking: u64) {
        let mut plain = self.plain.lock().unwrap_or_else(PoisonError::into_inner);
        if plain.len() >= MAX_BOOKED {
            plain.clear();
        }
        plain.insert((state.to_owned(), booking));
    }

    /// Notes the report `t` tells (if any) as the last one heard for `state`, which Redis now
    /// has: if it loses it, the state starts again from this report.
    fn heard(&self, state: &str, t: &Tightening, now: Instant) {
        let Some(report) = &t.report else { return };
        if *report == LimitReport::default() {
            return;
        }
        {
            let mut last = self
                .last_report
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.len() >= MAX_BOOKED && !last.contains_key(state) {
                last.clear();
            }
            last.insert(state.to_owned(), (report.clone(), now));
        }
        if !self.is_known(state) {
            self.know(state.to_owned());
        }
    }

    /// The report last heard for `state`, as the script's arguments for it at `now`.
    fn restatement(&self, state: &str, now: Instant) -> Option<HeldArgs> {
        let last = self
            .last_report
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (report, at) = last.get(state)?;
        let mut t = Tightening::default();
        t.report = Some(report.clone());
        Some(HeldArgs {
            raise: self.raise_args(&t, *at),
            ago: micros(now.saturating_duration_since(*at)),
        })
    }

    /// The reports held back for `key`, taken to be sent.
    fn take_held(&self, key: &LimitKey) -> Vec<(Tightening, Instant)> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.is_empty() {
            return Vec::new();
        }
        held.remove(&self.keys(key).0)
            .map(|h| h.raises)
            .unwrap_or_default()
    }

    /// Reports that could not be sent (Redis down): the local share hears them, as it hears
    /// every raise while Redis is down.
    async fn held_to_local(&self, key: &LimitKey, held: Vec<(Tightening, Instant)>) -> Result<()> {
        if self.share().is_some() {
            for (t, at) in held {
                self.local.raise(key, t, at).await?;
            }
        }
        Ok(())
    }

    /// Sends every report held back, a call per key: now, or at the latest instant one was
    /// held at if the runtime's clock is behind it (a virtual clock).
    async fn flush(&self) -> Result<()> {
        let held_at = *self.held_at.lock().unwrap_or_else(PoisonError::into_inner);
        let now = held_at.map_or_else(Instant::now, |at| at.max(Instant::now()));
        let keys: Vec<LimitKey> = {
            let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.values().map(|h| h.key.clone()).collect()
        };
        let nothing = self.raise_args(&Tightening::default(), now);
        for key in keys {
            self.call::<serde_json::Value>(&key, "raise", &nothing, now)
                .await?;
        }
        Ok(())
    }

    /// The script's arguments for a raise, instants from `now`.
    fn raise_args(&self, t: &Tightening, now: Instant) -> RaiseArgs {
        RaiseArgs {
            gate: t
                .gate_until
                .map(|g| micros(g.saturating_duration_since(now))),
            drain: WireDrain {
                r: t.drain.requests,
                t: t.drain.tokens,
                i: t.drain.input_tokens,
                o: t.drain.output_tokens,
                day: t.drain.day,
            },
            report: t.report.as_ref().map(|r| wire_report(r, now)),
            booking: t.booking,
            tokens_back: t.tokens_back,
            channel: self.channel(),
        }
    }

    /// Whether this store has seen `state` in Redis.
    fn is_known(&self, state: &str) -> bool {
        self.known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(state)
    }

    /// Notes that `state` exists in Redis (at most [`MAX_BOOKED`] keys are remembered; past
    /// it, the set starts over: a key forgotten so is made full again, as before).
    fn know(&self, state: String) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= MAX_BOOKED && !known.contains(&state) {
            known.clear();
        }
        known.insert(state);
    }

    /// The `Config` error for a Redis that refused this client.
    fn refused(&self, why: &str) -> Error {
        let check = if why.starts_with("TLS") {
            "check the CA and client certificate ([shared] tls_ca_file, tls_client_cert_file, \
             tls_client_key_file) and that the URL names a host the server's certificate holds"
        } else {
            "check the password and user in the Redis URL (LLM_FAILOVER_REDIS_URL or [shared] \
             redis_url)"
        };
        config_error(format!(
            "shared limits: Redis at {} refused this client ({why}): {check}",
            self.settings.host()
        ))
    }

    async fn invoke(
        &self,
        key: &LimitKey,
        op: &str,
        args: &impl Serialize,
        before: &[HeldArgs],
        ledgers: &[String],
        now: Instant,
    ) -> std::result::Result<String, Failure> {
        let unwritable =
            |e: serde_json::Error| Failure::Script(format!("cannot write the arguments: {e}"));
        let mut payload = serde_json::to_value(args).map_err(unwritable)?;
        if let (false, Some(map)) = (before.is_empty(), payload.as_object_mut()) {
            map.insert(
                "before".to_owned(),
                serde_json::to_value(before).map_err(unwritable)?,
            );
        }
        let payload = payload.to_string();
        let (state, probe) = self.keys(key);
        let clock = self
            .virtual_epoch
            .map(|epoch| now.saturating_duration_since(epoch).as_micros().to_string())
            .unwrap_or_default();
        let timeout = self.settings.timeout;
        let work = async {
            let mut conn = self.connection().await.map_err(classify)?;
            let mut call = self.script.key(state);
            call.key(probe);
            for ledger in ledgers {
                call.key(ledger);
            }
            call.arg(op)
                .arg(clock)
                .arg(millis(STATE_TTL))
                .arg(self.allowance.as_micros().to_string())
                .arg(payload)
                .invoke_async::<String>(&mut conn)
                .await
                .map_err(classify)
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(Failure::Down(format!("no answer within {timeout:?}"))),
        }
    }

    /// The connection, made now if there is none (first use, or Redis was down since): a
    /// Redis that comes back is used again by the first call after the retry interval.
    async fn connection(&self) -> redis::RedisResult<Conn> {
        held_or_new(&self.conn, &self.source, self.settings.timeout).await
    }

    /// The channel gates are announced on.
    fn channel(&self) -> String {
        format!("{}:gates", self.settings.key_prefix)
    }

    /// Starts listening for gate announcements (once; in the background, reconnecting until
    /// the store is dropped).
    fn listen(&self) {
        self.listening.call_once(|| {
            let gates = Arc::downgrade(&self.gates);
            let client = self.client.clone();
            let channel = self.channel();
            let pause = self.settings.retry_interval;
            tokio::spawn(listen(gates, client, channel, pause));
        });
    }

    /// Whether Redis is resting after a failure (not tried before its next try).
    /// Where `key`'s calls go, as far as being down is concerned: the one server, or on a
    /// cluster the target's own primary.
    fn scope(&self, key: &LimitKey) -> Option<String> {
        self.settings.cluster.then(|| self.keys(key).0)
    }

    fn resting(&self, key: &LimitKey, now: Instant) -> bool {
        let down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        down.get(&self.scope(key))
            .and_then(|d| d.next_try)
            .is_some_and(|t| now < t)
    }

    fn went_down(&self, key: &LimitKey, now: Instant, why: &str) {
        // The next try after the rest connects anew (on a cluster, the connection finds the
        // slots again: a replica may have taken over).
        self.conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let scope = self.scope(key);
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        let first = down.values().all(|d| d.next_try.is_none());
        down.entry(scope).or_default().next_try = Some(now + self.settings.retry_interval);
        if first {
            tracing::warn!(
                redis = %self.settings.host(),
                mode = mode_name(self.settings.when_down),
                "shared limits: Redis is unreachable ({why}){}; {}, trying it again every {:?}",
                if self.settings.cluster { " for some targets (their primary)" } else { "" },
                match self.settings.when_down {
                    WhenDown::LocalShare { .. } =>
                        "each process keeps to its share of the configured limits meanwhile",
                    _ => "nothing is admitted until it answers (fail closed)",
                },
                self.settings.retry_interval,
            );
        }
    }

    fn up(&self, key: &LimitKey, _now: Instant) {
        let scope = self.scope(key);
        let mut down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        if down.remove(&scope).is_some_and(|d| d.next_try.is_some())
            && down.values().all(|d| d.next_try.is_none())
        {
            tracing::warn!(redis = %self.settings.host(), "shared limits: Redis answers again");
        }
    }

    /// While `key`'s Redis is down: the wait before it is tried again.
    fn until_retry(&self, key: &LimitKey, now: Instant) -> Duration {
        let down = self.down.lock().unwrap_or_else(PoisonError::into_inner);
        down.get(&self.scope(key))
            .and_then(|d| d.next_try)
            .map_or(self.settings.retry_interval, |t| {
                t.saturating_duration_since(now)
            })
            .max(Duration::from_millis(1))
    }

    fn share(&self) -> Option<u32> {
        match self.settings.when_down {
            WhenDown::LocalShare { processes } => Some(processes.get()),
            _ => None,
        }
    }
}

/// Listens on `channel` for gate announcements while the store lives; after a lost
/// subscription, tries again every `pause` (a background reconnect's pacing, as the connection
/// manager's own; no decision waits on it: until it is back, every slot booked ahead is
/// checked in Redis).
async fn listen(gates: Weak<Gates>, client: redis::Client, channel: String, pause: Duration) {
    use futures_util::StreamExt;
    loop {
        let Some(g) = gates.upgrade() else { return };
        if let Ok(mut pubsub) = client.get_async_pubsub().await
            && pubsub.subscribe(&channel).await.is_ok()
        {
            g.epoch.fetch_add(1, Ordering::AcqRel);
            g.healthy.store(true, Ordering::Release);
            g.changed.notify_waiters();
            let weak = Arc::downgrade(&g);
            drop(g);
            let mut messages = pubsub.into_on_message();
            while let Some(msg) = messages.next().await {
                let Some(g) = weak.upgrade() else { return };
                if let Ok(state) = std::str::from_utf8(msg.get_payload_bytes()) {
                    let mut heard = g.heard.lock().unwrap_or_else(PoisonError::into_inner);
                    *heard.entry(state.to_owned()).or_insert(0) += 1;
                }
                g.changed.notify_waiters();
            }
            let Some(g) = weak.upgrade() else { return };
            g.healthy.store(false, Ordering::Release);
            g.epoch.fetch_add(1, Ordering::AcqRel);
            continue;
        }
        drop(g);
        #[allow(clippy::disallowed_methods)]
        tokio::time::sleep(pause).await;
    }
}

/// Why a call failed: Redis away (the mode applies), Redis refusing this client's
/// credentials or settings (a configuration error), or the script itself (an error).
enum Failure {
    Down(String),
    Refused(String),
    Script(String),
}

/// Whether Redis refused this client's credentials or settings: a wrong password
/// (`WRONGPASS`), none given to a server that wants one (`NOAUTH`), a user without the
/// permissions (`NOPERM`), or a URL the client cannot use.
pub(crate) fn refuses(e: &redis::RedisError) -> bool {
    tls_failure(e).is_some() || refuses_credentials(e)
}

/// What went wrong in TLS with Redis, if that is what `e` is: a certificate the client does
/// not trust or that names another host, a client certificate the server wanted, any alert.
/// A configuration to fix, not Redis being away: waiting would never end it.
pub(crate) fn tls_failure(e: &redis::RedisError) -> Option<String> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(mut err) = cause {
        // The redis crate keeps an I/O error behind an `Arc<dyn Error>`.
        if let Some(inner) = err.downcast_ref::<Shared>() {
            err = inner.as_ref();
        }
        let tls = err.downcast_ref::<rustls::Error>().or_else(|| {
            err.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return Some(tls.to_string());
        }
        cause = err.source();
    }
    None
}

fn refuses_credentials(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind as K, ServerErrorKind as S};
    matches!(
        e.kind(),
        K::AuthenticationFailed | K::InvalidClientConfig | K::Server(S::NoPerm)
    ) || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

fn classify(e: redis::RedisError) -> Failure {
    use redis::{ErrorKind as K, ServerErrorKind as S};
    if let Some(why) = tls_failure(&e) {
        return Failure::Refused(format!("TLS: {why}"));
    }
    let away = e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || matches!(
            e.kind(),
            K::Server(S::BusyLoading | S::TryAgain | S::ClusterDown | S::MasterDown)
        );
    if away {
        Failure::Down(e.to_string())
    } else if refuses(&e) {
        Failure::Refused(match e.code() {
            Some(code) => code.to_owned(),
            None => format!("{:?}", e.kind()),
        })
    } else {
        Failure::Script(e.to_string())
    }
}

fn mode_name(m: WhenDown) -> &'static str {
    match m {
        WhenDown::LocalShare { .. } => "local_share",
        _ => "wait",
    }
}

fn millis(d: Duration) -> String {
    d.as_millis().to_string()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn from_micros(us: f64) -> Duration {
    Duration::try_from_secs_f64(us.max(0.0) / 1e6).unwrap_or(Duration::MAX)
}

/// `{`, `}`, `|` and `%` escaped, so names cannot break the hash tag or the separators.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            '|' => out.push_str("%7C"),
            '%' => out.push_str("%25"),
            c => out.push(c),
        }
    }
    out
}

/// `limits` divided among `processes` (at least one unit each).
fn share_of(limits: &Limits, processes: u32) -> Limits {
    let part = |v: Option<std::num::NonZeroU64>| {
        v.and_then(|n| std::num::NonZeroU64::new((n.get() / u64::from(processes)).max(1)))
    };
    let mut share = Limits::default();
    share.rpm = part(limits.rpm);
    share.tpm = part(limits.tpm);
    share.rpd = part(limits.rpd);
    share.tpd = part(limits.tpd);
    share.audio_seconds_per_hour = part(limits.audio_seconds_per_hour);
    share
}

// ------------------------------------------------------------------ the script's wire form

#[derive(Serialize)]
struct WireLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    rpm: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tpm: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rpd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tpd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aud: Option<u64>,
}

impl From<&Limits> for WireLimits {
    fn from(l: &Limits) -> Self {
        let g = |v: Option<std::num::NonZeroU64>| v.map(std::num::NonZeroU64::get);
        WireLimits {
            rpm: g(l.rpm),
            tpm: g(l.tpm),
            rpd: g(l.rpd),
            tpd: g(l.tpd),
            aud: g(l.audio_seconds_per_hour),
        }
    }
}

#[derive(Serialize)]
struct WireCost {
    r: u64,
    i: u64,
    o: u64,
    a: u64,
}

impl From<Demand> for WireCost {
    fn from(c: Demand) -> Self {
        WireCost {
            r: c.requests,
            i: c.input_tokens,
            o: c.output_tokens,
            a: c.audio_seconds,
        }
    }
}

#[derive(Serialize)]
struct ReserveArgs {
    limits: WireLimits,
    cost: WireCost,
    max_wait: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    probe_ttl: Option<u64>,
    /// While another process's probe is out, how soon to look again (ms).
    probe_poll: u64,
    /// This store saw the key's state before: if it is missing now, it was lost.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    lost: bool,
    /// A bulk line's promised turn, handed back.
    #[serde(skip_serializing_if = "Option::is_none")]
    turn: Option<u64>,
    /// The report last heard, for a state Redis lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    restate: Option<HeldArgs>,
    /// Answer a grant with the configured buckets' levels (for the local share).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    share: bool,
    /// Budgets' charges, one per ledger key after the state's and the probe's.
    #[serde(skip_serializing_if = "Option::is_none")]
    budget: Option<Vec<WireCharge>>,
}

/// A budget's charge as the script reads it: nano-dollars (exact in a double below 2⁵³,
/// $9 million), the ledger's least time to live in ms, and what this store last saw the
/// ledger hold (restored if Redis lost it).
#[derive(Serialize)]
struct WireCharge {
    cap: u64,
    amount: u64,
    keep: u64,
    seen: u64,
}

/// The configured buckets' levels after a grant (`share`).
#[derive(Deserialize, Default)]
struct WireLevels {
    rpm: Option<f64>,
    tpm: Option<f64>,
    rpd: Option<f64>,
    tpd: Option<f64>,
    aud: Option<f64>,
}

impl WireLevels {
    /// A `processes`th part of each.
    fn part(&self, processes: u32) -> ConfiguredLevels {
        let part = |v: Option<f64>| v.map(|l| l / f64::from(processes));
        ConfiguredLevels {
            rpm: part(self.rpm),
            tpm: part(self.tpm),
            rpd: part(self.rpd),
            tpd: part(self.tpd),
            audio_seconds_per_hour: part(self.aud),
        }
    }
}

#[derive(Deserialize)]
struct ReserveAnswer {
    #[serde(default)]
    granted: bool,
    #[serde(default)]
    too_large: bool,
    #[serde(default)]
    wait: f64,
    #[serde(default)]
    booking: u64,
    token_room: Option<u64>,
    dimension: Option<String>,
    #[serde(default)]
    cost: u64,
    #[serde(default)]
    capacity: u64,
    /// The grant is the half-open probe.
    #[serde(default)]
    probe: bool,
    /// A promised turn: the asker's own (not granted), or its line's next one (granted).
    turn: Option<u64>,
    /// The wait until the next one's turn (granted).
    next: Option<f64>,
    /// The state this store saw is gone: tell the last report heard.
    #[serde(default)]
    restate: bool,
    /// The configured buckets' levels after the grant (asked with `share`).
    levels: Option<WireLevels>,
    /// The budget charge (0-based) its ledger could not cover: nothing was booked.
    over_budget: Option<usize>,
    /// What that ledger holds.
    #[serde(default)]
    spent: u64,
    /// After a grant: what each charged ledger holds, in order (absent without charges,
    /// never an empty table).
    #[serde(default)]
    budget_held: Vec<i64>,
}

#[derive(Serialize)]
struct RefundArgs {
    requests: u64,
    tokens: i64,
}

#[derive(Serialize, Default)]
struct WireWindow {
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining: Option<u64>,
    /// Microseconds from now (0 for a reset already past).
    #[serde(skip_serializing_if = "Option::is_none")]
    reset: Option<f64>,
    per: &'static str,
}

fn wire_window(w: &Window, now: Instant) -> WireWindow {
    WireWindow {
        limit: w.limit,
        remaining: w.remaining,
        reset: w.reset_at.map(|r| micros(r.saturating_duration_since(now))),
        per: match w.per {
            Per::Minute => "m",
            Per::Day => "d",
            _ => "u",
        },
    }
}

#[derive(Serialize, Default)]
struct WireReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    r: Option<WireWindow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    t: Option<WireWindow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    i: Option<WireWindow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    o: Option<WireWindow>,
}

fn wire_report(r: &LimitReport, now: Instant) -> WireReport {
    let w = |w: &Option<Window>| w.as_ref().map(|w| wire_window(w, now));
    WireReport {
        r: w(&r.requests),
        t: w(&r.tokens),
        i: w(&r.input_tokens),
        o: w(&r.output_tokens),
    }
}

#[derive(Serialize)]
struct WireDrain {
    r: bool,
    t: bool,
    i: bool,
    o: bool,
    day: bool,
}

#[derive(Serialize)]
struct RaiseArgs {
    #[serde(skip_serializing_if = "Option::is_none")]
    gate: Option<f64>,
    drain: WireDrain,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<WireReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    booking: Option<u64>,
    tokens_back: i64,
    channel: String,
}

/// A raise held back: told `ago` microseconds before the call that carries it.
#[derive(Serialize)]
struct HeldArgs {
    #[serde(flatten)]
    raise: RaiseArgs,
    ago: f64,
}

#[derive(Serialize)]
struct PeekArgs {
    cost: WireCost,
}

#[derive(Deserialize)]
struct WireBucket {
    level: f64,
    capacity: u64,
    window: f64,
    reset: Option<f64>,
}

#[derive(Deserialize)]
struct PeekAnswer {
    wait: Option<f64>,
    requests: Option<WireBucket>,
    tokens: Option<WireBucket>,
    token_room: Option<u64>,
    learned_rate: Option<f64>,
    gate: Option<f64>,
}

fn dimension(name: &str) -> Dimension {
    match name {
        "requests_per_minute" => Dimension::RequestsPerMinute,
        "tokens_per_minute" => Dimension::TokensPerMinute,
        "requests_per_day" => Dimension::RequestsPerDay,
        "tokens_per_day" => Dimension::TokensPerDay,
        "audio_seconds_per_hour" => Dimension::AudioSecondsPerHour,
        "tokens" => Dimension::Tokens,
        "input_tokens" => Dimension::InputTokens,
        "output_tokens" => Dimension::OutputTokens,
        _ => Dimension::Requests,
    }
}

impl Inner {
    /// Connects and sends a PING now: `Config` when Redis refuses this client; `Ok` when
    /// it answers, and when it cannot be reached (the down mode governs requests then).
    async fn check(&self) -> Result<()> {
        let timeout = self.settings.timeout;
        let work = async {
            let mut conn = self.connection().await.map_err(classify)?;
            redis::cmd("PING")
                .query_async::<String>(&mut conn)
                .await
                .map_err(classify)
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(Err(Failure::Refused(why))) => Err(self.refused(&why)),
            Ok(Err(Failure::Script(why))) => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "shared limits: Redis at {} answered PING with an error: {why}",
                    self.settings.host()
                ),
            )),
            Ok(Ok(_) | Err(Failure::Down(_))) | Err(_) => Ok(()),
        }
    }

    /// A reservation (`Ask::Reserve`) or a bulk line's turn (`Ask::Turn`): one call of the
    /// script, or the down mode's answer.
    async fn ask(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        charges: &[Charge],
        how: Ask,
        now: Instant,
    ) -> Result<(Reservation, Option<Turn>)> {
        if self.probe_ttl.is_some() {
            self.listen();
        }
        let state = self.keys(key).0;
        let before = self.gates.before(&state);
        let known = self.is_known(&state);
        let (op, max_wait, turn) = match how {
            Ask::Reserve { max_wait } => ("reserve", max_wait, None),
            Ask::Turn { held } => ("turn", Duration::ZERO, held),
        };
        let mut args = ReserveArgs {
            limits: limits.into(),
            cost: cost.into(),
            max_wait: micros(max_wait),
            probe_ttl: self.probe_ttl.map(|t| t.as_millis() as u64),
            probe_poll: PROBE_POLL.as_millis() as u64,
            lost: known,
            turn,
            restate: None,
            share: self.share().is_some(),
            budget: (!charges.is_empty()).then(|| self.wire_charges(charges, now)),
        };
        let ledgers: Vec<String> = charges.iter().map(|c| self.ledger(&c.ledger)).collect();
        let mut answer = self
            .call_with::<ReserveAnswer>(key, op, &args, &ledgers, now)
            .await?;
        if answer.as_ref().is_some_and(|a| a.restate) {
            // Redis lost the state this store saw: it starts again from the last report
            // heard (a second call, once per loss).
            args.restate = self.restatement(&state, now);
            args.lost = args.restate.is_some();
            answer = self
                .call_with::<ReserveAnswer>(key, op, &args, &ledgers, now)
                .await?;
        }
        let Some(a) = answer else {
            let down = match self.share() {
                // Money is not shared out between processes while Redis is away: a request
                // charged to a budget waits for it, whatever the mode (a share of each budget
                // per process would start full, on top of what was spent).
                Some(_) if !charges.is_empty() => Reservation::NotUntil {
                    wait: self.until_retry(key, now),
                },
                Some(n) => {
                    let limits = share_of(limits, n);
                    self.local
                        .reserve(key, &limits, cost, max_wait, now)
                        .await?
                }
                None => Reservation::NotUntil {
                    wait: self.until_retry(key, now),
                },
            };
            return Ok((down, None));
        };
        if !known && limits != &Limits::none() {
            // Configured limits: the script made the key's state if it had none.
            self.know(state.clone());
        }
        let promised = a.turn.map(|number| Turn {
            number,
            wait: from_micros(a.next.unwrap_or(a.wait)),
        });
        if let Some(charge) = a.over_budget {
            if let Some(c) = charges.get(charge) {
                self.saw_ledger(c, a.spent, now);
            }
            let over = Reservation::OverBudget {
                charge,
                spent: a.spent,
            };
            return Ok((over, None));
        }
        for (c, held) in charges.iter().zip(&a.budget_held) {
            self.saw_ledger(c, u64::try_from(*held).unwrap_or(0), now);
        }
        if a.too_large {
            let too_large = Reservation::TooLarge {
                dimension: dimension(a.dimension.as_deref().unwrap_or_default()),
                cost: a.cost,
                capacity: a.capacity,
            };
            return Ok((too_large, None));
        }
        if !a.granted {
            let wait = from_micros(a.wait).max(Duration::from_micros(1));
            return Ok((Reservation::NotUntil { wait }, promised));
        }
        let booked = Booked {
            state: &state,
            before,
            probe: a.probe,
        };
        let granted = self.granted(key, limits, cost, &a, booked, now).await?;
        Ok((granted, promised))
    }

    /// A grant the script answered: remembered for the checks before its send and the answer
    /// it gets, and mirrored in the local share.
    async fn granted(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        a: &ReserveAnswer,
        booked: Booked<'_>,
        now: Instant,
    ) -> Result<Reservation> {
        let wait = from_micros(a.wait);
        if !wait.is_zero() {
            self.gates
                .booked_ahead(booked.state, a.booking, booked.before);
        }
        if !booked.probe {
            self.booked_plain(booked.state, a.booking);
        }
        if let Some(n) = self.share() {
            // The local share follows this process's own use and its part of the shared
            // levels while Redis is up, and keeps the lower: an outage starts every
            // process's share from there (negative: booked ahead), not full. Full shares in
            // every process at once overshoot the quota they share; own use alone does not
            // count what the others took, nor the shared level alone what this process took
            // (a process that never booked starts from its full share).
            let share = share_of(limits, n);
            self.local
                .reserve(key, &share, cost, Duration::ZERO, now)
                .await?;
            let levels = a.levels.as_ref().map(|l| l.part(n)).unwrap_or_default();
            self.local.follow(key, &share, &levels, now);
        }
        Ok(Reservation::Granted {
            wait,
            token_room: a.token_room,
            booking: a.booking,
        })
    }

    async fn refund(&self, key: &LimitKey, requests: u64, tokens: i64, now: Instant) -> Result<()> {
        let args = RefundArgs { requests, tokens };
        if self
            .call::<serde_json::Value>(key, "refund", &args, now)
            .await?
            .is_none()
            && self.share().is_some()
        {
            self.local.refund(key, requests, tokens, now).await?;
        }
        Ok(())
    }

    async fn raise(&self, key: &LimitKey, t: Tightening, now: Instant) -> Result<()> {
        self.heard(&self.keys(key).0, &t, now);
        let args = self.raise_args(&t, now);
        if self
            .call::<serde_json::Value>(key, "raise", &args, now)
            .await?
            .is_none()
            && self.share().is_some()
        {
            self.local.raise(key, t, now).await?;
        }
        Ok(())
    }

    async fn blocked(
        &self,
        key: &LimitKey,
        booking: u64,
        now: Instant,
    ) -> Result<Option<Duration>> {
        #[derive(Serialize)]
        struct CheckArgs {
            booking: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            probe_ttl: Option<u64>,
            probe_poll: u64,
        }
        #[derive(Deserialize)]
        struct CheckAnswer {
            wait: Option<f64>,
        }
        if self.gates.quiet_since(&self.keys(key).0, booking) {
            // No gate announced on this key since the slot was booked: it may go, no call.
            return Ok(None);
        }
        let args = CheckArgs {
            booking,
            probe_ttl: self.probe_ttl.map(|t| t.as_millis() as u64),
            probe_poll: PROBE_POLL.as_millis() as u64,
        };
        match self.call::<CheckAnswer>(key, "check", &args, now).await? {
            Some(a) => Ok(a.wait.map(from_micros)),
            // Down: the slot was booked while Redis answered; fail closed waits for it.
            None if self.share().is_none() => Ok(Some(self.until_retry(key, now))),
            None => Ok(None),
        }
    }

    async fn peek(&self, key: &LimitKey, cost: Demand, now: Instant) -> Result<LimitSnapshot> {
        let args = PeekArgs { cost: cost.into() };
        let Some(p) = self.call::<PeekAnswer>(key, "peek", &args, now).await? else {
            return match self.share() {
                Some(_) => self.local.peek(key, cost, now).await,
                None => {
                    let mut snapshot = LimitSnapshot::default();
                    snapshot.wait = Some(self.until_retry(key, now));
                    Ok(snapshot)
                }
            };
        };
        let bucket = |b: WireBucket| {
            BucketSnapshot::new(
                b.level,
                b.capacity,
                from_micros(b.window),
                b.reset.map(|r| now + from_micros(r)),
            )
        };
        let mut snapshot = LimitSnapshot::default();
        snapshot.requests = p.requests.map(bucket);
        snapshot.tokens = p.tokens.map(bucket);
        snapshot.learned_rate = p.learned_rate;
        snapshot.gate_until = p.gate.map(|g| now + from_micros(g));
        snapshot.wait = p.wait.map(from_micros);
        snapshot.token_room = p.token_room;
        Ok(snapshot)
    }
}

/// A grant's state key, what was heard of its gates before it was asked for, and whether it
/// is the half-open probe.
struct Booked<'a> {
    state: &'a str,
    before: Option<(u64, u64)>,
    probe: bool,
}

/// How a slot is asked for.
#[derive(Clone, Copy)]
enum Ask {
    /// Booked if it can start within `max_wait`.
    Reserve { max_wait: Duration },
    /// A bulk line's head, holding a promised turn or not.
    Turn { held: Option<u64> },
}

#[async_trait]
impl LimiterStore for RedisStore {
    /// Connects and sends a PING now: `Config` when Redis refuses this client; `Ok` when
    /// it answers, and when it cannot be reached (the down mode governs requests then).
    async fn check(&self) -> Result<()> {
        self.inner.check().await
    }

    async fn reserve(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation> {
        let how = Ask::Reserve { max_wait };
        Ok(self.inner.ask(key, limits, cost, &[], how, now).await?.0)
    }

    /// The ledgers are checked and booked in the same script call as the buckets.
    async fn reserve_charged(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        charges: &[Charge],
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation> {
        let how = Ask::Reserve { max_wait };
        Ok(self
            .inner
            .ask(key, limits, cost, charges, how, now)
            .await?
            .0)
    }

    async fn take_turn_charged(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        charges: &[Charge],
        held: Option<u64>,
        now: Instant,
    ) -> Result<(Reservation, Option<Turn>)> {
        let how = Ask::Turn { held };
        self.inner.ask(key, limits, cost, charges, how, now).await
    }

    async fn settle(&self, ledgers: &[(Arc<str>, i64)], _now: Instant) -> Result<()> {
        self.inner.settle(ledgers).await
    }

    /// One Redis: the ledgers go in the script call with the buckets. A Cluster would route
    /// a budget's ledger to another node than a key's state, and one call cannot name both.
    fn keeps_budgets(&self) -> Result<()> {
        if self.inner.settings.cluster {
            return Err(Error::new(
                ErrorKind::Config,
                "budgets are not kept on a Redis Cluster yet (a ledger and a limit key live on \
                 different nodes, and one script call cannot reach both): share limits \
                 through one Redis, or drop the budget",
            ));
        }
        Ok(())
    }

    /// Promised turns: see the script's "turns".
    async fn take_turn(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        held: Option<u64>,
        now: Instant,
    ) -> Result<(Reservation, Option<Turn>)> {
        let how = Ask::Turn { held };
        self.inner.ask(key, limits, cost, &[], how, now).await
    }

    async fn refund(&self, key: &LimitKey, requests: u64, tokens: i64, now: Instant) -> Result<()> {
        self.inner.refund(key, requests, tokens, now).await
    }

    /// An answer's report is held back to travel with the next call on its key, or sent
    /// within 250 ms; what another process must hear at once goes now (`Inner::hold`).
    async fn raise(&self, key: &LimitKey, t: Tightening, now: Instant) -> Result<()> {
        if self.inner.hold(key, &t, now) {
            self.flush_soon();
            return Ok(());
        }
        self.inner.raise(key, t, now).await
    }

    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn blocked(
        &self,
        key: &LimitKey,
        booking: u64,
        now: Instant,
    ) -> Result<Option<Duration>> {
        self.inner.blocked(key, booking, now).await
    }

    async fn peek(&self, key: &LimitKey, cost: Demand, now: Instant) -> Result<LimitSnapshot> {
        self.inner.peek(key, cost, now).await
    }
}

impl RedisStore {
    /// Sends the reports held back after [`LINGER`], unless a send is scheduled already (in
    /// the background; a report that finds the store dropped is not sent).
    fn flush_soon(&self) {
        if self.inner.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.flushing.store(false, Ordering::Release);
            return;
        };
        let inner = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            // A transport's batching delay, not a decision: nothing waits on it, and a test on a
            // paused clock sees it pass with the clock.
            #[allow(clippy::disallowed_methods)]
            tokio::time::sleep(LINGER).await;
            let Some(inner) = inner.upgrade() else { return };
            inner.flushing.store(false, Ordering::Release);
            if let Err(e) = inner.flush().await {
                tracing::warn!(error = %e, "shared limits: could not send the answers' reports");
            }
        });
    }
}
