//! [`eta`]: how long the rest of a batch will take, from the pace the providers' limits allow
//! and the pace seen so far (the ETA of the command's progress line).
//!
//! Extrapolating from the first seconds is wrong for a paced batch: buckets start full, so
//! the first items go at once and the rest at the limits' refill rate. The estimate here asks
//! the limits instead — each provider's [`Pace`]: what it can admit now and its refill rate —
//! and takes the later of that and the pace observed, which is what binds when answers are
//! slow rather than limits tight.

use std::time::Duration;

use tokio::time::Instant;

use llm_failover::ratelimit::LimitSnapshot;

/// What one provider's limits let through, in items.
///
/// For 60 requests a minute with 15 left and 30 000 tokens a minute with 6 000 left, items of
/// about 1 000 tokens go at half an item a second, 6 at once (the token limit binds); before
/// any answer told the token use, only the request limit counts (1 a second, 15 at once).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Pace {
    /// Items a second in the long run: the binding bucket's refill rate.
    pub(crate) per_second: f64,
    /// Items that could be admitted at once when it opens; negative when slots are already
    /// booked ahead (items waiting for admission).
    pub(crate) available: f64,
    /// Until it sends anything again: a gate (a stated reset, a `Retry-After`).
    pub(crate) opens_in: Duration,
}

impl Pace {
    /// A pace of `per_second` items a second with `available` admissible now.
    pub(crate) fn new(per_second: f64, available: f64) -> Self {
        Pace {
            per_second,
            available,
            opens_in: Duration::ZERO,
        }
    }

    /// This pace, from `opens_in` on.
    #[must_use]
    pub(crate) fn opening_in(mut self, opens_in: Duration) -> Self {
        self.opens_in = opens_in;
        self
    }

    /// The pace `limits` allow at `now` for items of `tokens_per_item` tokens on average
    /// (input and output; `None` before any answer told: only the request limits count).
    /// `None` when the limits bound nothing: no bucket and no pace learned from 429s.
    pub(crate) fn from_limits(
        limits: &LimitSnapshot,
        tokens_per_item: Option<f64>,
        now: Instant,
    ) -> Option<Pace> {
        let mut bounds: Vec<Pace> = Vec::with_capacity(3);
        if let Some(b) = limits.requests {
            bounds.extend(bucket_pace(b.level, b.capacity, b.window, 1.0));
        }
        if let (Some(b), Some(k)) = (limits.tokens, tokens_per_item.filter(|k| *k >= 1.0)) {
            bounds.extend(bucket_pace(b.level, b.capacity, b.window, k));
        }
        if bounds.is_empty()
            && let Some(rate) = limits.learned_rate.filter(|r| r.is_finite() && *r > 0.0)
        {
            bounds.push(Pace::new(rate, 0.0));
        }
        let opens_in = limits
            .gate_until
            .map_or(Duration::ZERO, |g| g.saturating_duration_since(now));
        bounds
            .into_iter()
            .reduce(|a, b| Pace::new(a.per_second.min(b.per_second), a.available.min(b.available)))
            .map(|p| p.opening_in(opens_in))
    }
}

/// The pace of one bucket in items of `cost` units each.
fn bucket_pace(level: f64, capacity: u64, window: Duration, cost: f64) -> Option<Pace> {
    let seconds = window.as_secs_f64();
    if seconds <= 0.0 || !level.is_finite() {
        return None;
    }
    Some(Pace::new(capacity as f64 / seconds / cost, level / cost))
}

/// How long the `left` unfinished items (`in_flight` of them already started) will take.
///
/// * `paces`: one entry per provider the items may go to; `None` for a provider whose limits
///   bound nothing (the limits then bound nothing overall).
/// * `observed`: items finished a second so far in this run, when any finished.
///
/// From the limits: the items not yet started are admitted as the providers allow (what is
/// available when each opens, then each at its refill rate once its bookings ahead are paid
/// back), and the run ends no earlier than the last slot already booked. The estimate is the later of
/// that and `left / observed`, since slow answers bind as surely as limits; `None` when
/// neither is known.
///
/// 100 items left, none started, one provider with 40 slots now and 2 a second after: 30 s.
/// Once the first 40 went in a second, 60 are left and the limits still say 30 s, not the
/// 1.5 s the observed pace would.
pub(crate) fn eta(
    left: u64,
    in_flight: u64,
    paces: &[Option<Pace>],
    observed: Option<f64>,
) -> Option<Duration> {
    if left == 0 {
        return Some(Duration::ZERO);
    }
    let by_limits = paces
        .iter()
        .copied()
        .collect::<Option<Vec<Pace>>>()
        .filter(|p| !p.is_empty())
        .and_then(|p| admit_all(left.saturating_sub(in_flight) as f64, &p));
    let by_pace = observed
        .filter(|r| r.is_finite() && *r > 0.0)
        .map(|r| left as f64 / r);
    let seconds = match (by_limits, by_pace) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => a.or(b)?,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

/// Seconds until `items` more are admitted by `paces` together and every slot booked ahead
/// is reached; `None` when some pace is not a positive rate.
fn admit_all(items: f64, paces: &[Pace]) -> Option<f64> {
    if paces
        .iter()
        .any(|p| !(p.per_second.is_finite() && p.per_second > 0.0 && p.available.is_finite()))
    {
        return None;
    }
    // Each provider admits nothing until it opens (at `g`) and its bookings ahead are paid
    // back (at `start`), then available + rate × (t − g) by time t. Walk the starts in order.
    let mut starts: Vec<(f64, &Pace)> = paces
        .iter()
        .map(|p| {
            let g = p.opens_in.as_secs_f64();
            (g + (-p.available / p.per_second).max(0.0), p)
        })
        .collect();
    starts.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The last slot booked ahead, where items already wait.
    let booked_until = starts
        .iter()
        .filter(|(_, p)| p.available < 0.0)
        .map(|s| s.0)
        .fold(0.0, f64::max);
    let (mut rate, mut base) = (0.0, 0.0); // admitted(t) = base + rate × t over active paces
    for (i, (start, p)) in starts.iter().enumerate() {
        rate += p.per_second;
        base += p.available - p.per_second * p.opens_in.as_secs_f64();
        let next = starts.get(i + 1).map_or(f64::INFINITY, |s| s.0);
        let t = ((items - base) / rate).max(*start);
        if t <= next {
            return Some(t.max(booked_until));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use llm_failover::ratelimit::BucketSnapshot;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn the_estimate_follows_the_limits_not_the_first_seconds() {
        let p = |rate: f64, available: f64| Some(Pace::new(rate, available));
        // (left, in flight, paces, observed pace, expected seconds)
        type Case<'a> = (u64, u64, &'a [Option<Pace>], Option<f64>, Option<f64>);
        let cases: &[Case<'_>] = &[
            (0, 0, &[p(1.0, 0.0)], None, Some(0.0)),
            // Everything fits in what is available now.
            (10, 0, &[p(1.0, 20.0)], None, Some(0.0)),
            // 40 now, then 2 a second: 60 more take 30 s.
            (100, 0, &[p(2.0, 40.0)], None, Some(30.0)),
            // Burst spent, the observed pace (100 a second) says 0.6 s: the limits win.
            (60, 0, &[p(2.0, 0.0)], Some(100.0), Some(30.0)),
            // Slow answers: 1 a second observed against limits allowing 10: the pace wins.
            (60, 0, &[p(10.0, 0.0)], Some(1.0), Some(60.0)),
            // Two providers add up: 3 a second from 0.
            (30, 0, &[p(2.0, 0.0), p(1.0, 0.0)], None, Some(10.0)),
            // Items in flight are booked already: 16 waiting on 8 slots booked ahead at 1 a
            // second end no earlier than 8 s.
            (16, 16, &[p(1.0, -8.0)], None, Some(8.0)),
            // A provider booked ahead joins once paid back: A gives 2/s from 0, B gives 2/s
            // from 5 s on; 20 items: 10 by A alone at 5 s, the other 10 at 4/s: 7.5 s.
            (20, 0, &[p(2.0, 0.0), p(2.0, -10.0)], None, Some(7.5)),
            // A gate: nothing for 3 s, then 10 at once and 2 a second: 20 items at 8 s.
            (
                20,
                0,
                &[Some(
                    Pace::new(2.0, 10.0).opening_in(Duration::from_secs(3)),
                )],
                None,
                Some(8.0),
            ),
            // A gated primary and an open secondary: 1/s from 0 on B, A opens at 4 s with 6
            // at once: 4 by 4 s, 10 at 4 s, then 3 a second: 16 items at 6 s.
            (
                16,
                0,
                &[
                    Some(Pace::new(2.0, 6.0).opening_in(Duration::from_secs(4))),
                    p(1.0, 0.0),
                ],
                None,
                Some(6.0),
            ),
            // Unbounded provider: the limits say nothing; only the observed pace is left.
            (50, 0, &[p(1.0, 0.0), None], Some(5.0), Some(10.0)),
            (50, 0, &[None], None, None),
            (50, 0, &[], None, None),
            // Nothing known at all, or nonsense rates.
            (50, 0, &[p(0.0, 0.0)], None, None),
            (50, 0, &[p(f64::NAN, 0.0)], Some(f64::INFINITY), None),
        ];
        for (left, in_flight, paces, observed, want) in cases {
            let got = eta(*left, *in_flight, paces, *observed).map(|d| d.as_secs_f64());
            match (got, want) {
                (Some(g), Some(w)) => assert!((g - w).abs() < 1e-6, "{left} {paces:?}: {g} != {w}"),
                _ => assert_eq!(got, *want, "{left} {paces:?} {observed:?}"),
            }
        }
    }

    #[test]
    fn a_providers_pace_is_its_binding_bucket_in_items() {
        let bucket = |level: f64, capacity: u64, window: Duration| {
            Some(BucketSnapshot::new(level, capacity, window, None))
        };
        let limits = |requests, tokens, learned: Option<f64>| {
            let mut snapshot = LimitSnapshot::default();
            (snapshot.requests, snapshot.tokens) = (requests, tokens);
            snapshot.learned_rate = learned;
            snapshot
        };
        // (limits, tokens per item, expected (per second, available))
        let cases = [
            (
                limits(bucket(60.0, 60, MINUTE), None, None),
                None,
                Some((1.0, 60.0)),
            ),
            // A stated 6-second window refills ten times as fast as its capacity per minute.
            (
                limits(bucket(3.0, 10, Duration::from_secs(6)), None, None),
                None,
                Some((10.0 / 6.0, 3.0)),
            ),
            // Booked ahead: negative available.
            (
                limits(bucket(-4.0, 60, MINUTE), None, None),
                None,
                Some((1.0, -4.0)),
            ),
            // Tokens bind at 500-token items: 40 000 a minute is 80 items a minute.
            (
                limits(
                    bucket(180.0, 180, MINUTE),
                    bucket(10_000.0, 40_000, MINUTE),
                    None,
                ),
                Some(500.0),
                Some((40_000.0 / 60.0 / 500.0, 20.0)),
            ),
            // Token use unknown: tokens are left out.
            (
                limits(
                    bucket(180.0, 180, MINUTE),
                    bucket(10.0, 40_000, MINUTE),
                    None,
                ),
                None,
                Some((3.0, 180.0)),
            ),
            // Only tokens known and items of unknown size: nothing bounds.
            (limits(None, bucket(10.0, 40_000, MINUTE), None), None, None),
            // A pace learned from 429s alone.
            (limits(None, None, Some(0.5)), None, Some((0.5, 0.0))),
            (limits(None, None, None), Some(100.0), None),
        ];
        let now = Instant::now();
        for (snapshot, k, want) in cases {
            let got = Pace::from_limits(&snapshot, k, now).map(|p| (p.per_second, p.available));
            assert_eq!(got, want, "{snapshot:?} {k:?}");
        }
        let mut gated = limits(bucket(60.0, 60, MINUTE), None, None);
        gated.gate_until = Some(now + Duration::from_secs(5));
        let pace = Pace::from_limits(&gated, None, now).unwrap();
        assert_eq!(pace.opens_in, Duration::from_secs(5));
        gated.gate_until = Some(now);
        assert_eq!(
            Pace::from_limits(&gated, None, now + MINUTE)
                .unwrap()
                .opens_in,
            Duration::ZERO
        );
    }
}
