//! The Redis store against a real `redis-server` (the Debian package, started on a free
//! loopback port): the same semantics as the in-memory store — the same sequences of
//! reservations, refunds, reports, drains, gates and peeks on one virtual clock give the same
//! answers — plus what only sharing adds: one half-open probe across clients, and Redis
//! down as a mode.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::ProviderId;
use llm_failover::ratelimit::{
    Demand, Drain, LimitKey, LimitReport, LimitSnapshot, LimiterStore, Limits, MemoryStore, Per,
    Reservation, SharedSettings, Tightening, WhenDown, Window,
};
use llm_failover::redis::RedisStore;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::support::redis::RedisServer;

const MS: Duration = Duration::from_millis(1);

/// `redis-cli` (from the Debian package, with the server) against `redis`: what it prints.
fn cli(redis: &RedisServer, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli (apt-get install redis-server)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn key(i: usize) -> LimitKey {
    LimitKey::new(
        ProviderId::new(["openai", "anthropic", "groq"][i % 3]),
        "m{x|y}",
    )
}

/// One operation of a sequence.
#[derive(Clone, Debug)]
enum Op {
    Reserve {
        key: usize,
        limits: Limits,
        cost: Demand,
        max_wait: Duration,
    },
    Refund {
        key: usize,
        requests: u64,
        tokens: i64,
    },
    Raise {
        key: usize,
        t: Box<Tightening>,
    },
    Peek {
        key: usize,
        cost: Demand,
    },
    Advance(Duration),
}

fn limits(rng: &mut StdRng) -> Limits {
    match rng.random_range(0..5) {
        0 => Limits::none(),
        1 => Limits::none().with_rpm(rng.random_range(2..120)),
        2 => Limits::none().with_tpm(rng.random_range(500..20_000)),
        3 => Limits::none()
            .with_rpm(rng.random_range(2..120))
            .with_tpm(rng.random_range(500..20_000))
            .with_rpd(rng.random_range(100..10_000)),
        _ => Limits::none()
            .with_rpm(rng.random_range(2..60))
            .with_tpd(50_000),
    }
}

fn cost(rng: &mut StdRng) -> Demand {
    Demand {
        input_tokens: rng.random_range(0..800),
        output_tokens: rng.random_range(0..400),
        ..Demand::one_request()
    }
}

fn window(rng: &mut StdRng, now: Instant) -> Option<Window> {
    if rng.random_bool(0.3) {
        return None;
    }
    let limit = rng.random_range(1..2_000u64);
    Some(Window {
        limit: rng.random_bool(0.9).then_some(limit),
        remaining: rng.random_bool(0.9).then(|| rng.random_range(0..=limit)),
        reset_at: rng
            .random_bool(0.7)
            .then(|| now + MS * rng.random_range(0..90_000u32)),
        per: [Per::Minute, Per::Day, Per::Unknown][rng.random_range(0..3)],
    })
}

fn tightening(rng: &mut StdRng, now: Instant, bookings: &[u64]) -> Tightening {
    let report = rng.random_bool(0.7).then(|| {
        let mut r = LimitReport::default();
        r.requests = window(rng, now);
        r.tokens = window(rng, now);
        if rng.random_bool(0.2) {
            r.input_tokens = window(rng, now);
        }
        if rng.random_bool(0.2) {
            r.output_tokens = window(rng, now);
        }
        r
    });
    let throttled = rng.random_bool(0.25);
    let mut t = Tightening::default();
    t.report = report;
    if throttled {
        t.drain = match rng.random_range(0..3) {
            0 => Drain::every_minute(),
            1 => {
                let mut d = Drain::none();
                d.tokens = true;
                d
            }
            _ => {
                let mut d = Drain::none();
                d.requests = true;
                d.day = true;
                d
            }
        };
        t.gate_until = rng
            .random_bool(0.6)
            .then(|| now + MS * rng.random_range(0..20_000u32));
    }
    if rng.random_bool(0.3) {
        t.tokens_back = rng.random_range(-300..300);
    }
    t.booking = if bookings.is_empty() || rng.random_bool(0.15) {
        None
    } else {
        Some(bookings[rng.random_range(0..bookings.len())])
    };
    t
}

/// A sequence of `n` operations over three keys, from `seed`.
fn sequence(seed: u64, n: usize, t0: Instant) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut now = t0;
    let mut ops = Vec::new();
    let mut bookings = Vec::new();
    let configured: Vec<Limits> = (0..3).map(|_| limits(&mut rng)).collect();
    for _ in 0..n {
        let k = rng.random_range(0..3);
        let op = match rng.random_range(0..10) {
            0..=3 => Op::Reserve {
                key: k,
                limits: configured[k],
                cost: cost(&mut rng),
                max_wait: MS * rng.random_range(0..30_000u32) + Duration::from_micros(317),
            },
            4 => Op::Refund {
                key: k,
                requests: rng.random_range(0..2),
                tokens: rng.random_range(-300..300),
            },
            5 | 6 => Op::Raise {
                key: k,
                t: Box::new(tightening(&mut rng, now, &bookings)),
            },
            7 => Op::Peek {
                key: k,
                cost: cost(&mut rng),
            },
            _ => {
                let d = MS * rng.random_range(0..4_000u32);
                now += d;
                Op::Advance(d)
            }
        };
        ops.push(op);
        // Booking numbers the sequence may answer later (per-key numbers overlap: fine, an
        // unknown one is just older news).
        bookings.push(rng.random_range(0..40));
    }
    ops
}

/// What an operation answered, comparable across stores within float tolerance.
#[derive(Debug)]
enum Answer {
    Reserved(Reservation),
    Done,
    Peeked(LimitSnapshot),
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 + 1e-9 * a.abs().max(b.abs())
}

fn close_d(a: Duration, b: Duration) -> bool {
    a.abs_diff(b) <= Duration::from_micros(3)
}

fn close_i(a: Option<Instant>, b: Option<Instant>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => close_d(a.max(b) - a.min(b), Duration::ZERO),
        _ => false,
    }
}

fn same(a: &Answer, b: &Answer) -> bool {
    match (a, b) {
        (Answer::Done, Answer::Done) => true,
        (Answer::Reserved(x), Answer::Reserved(y)) => match (x, y) {
            (
                Reservation::Granted {
                    wait: w1,
                    token_room: r1,
                    booking: b1,
                },
                Reservation::Granted {
                    wait: w2,
                    token_room: r2,
                    booking: b2,
                },
            ) => close_d(*w1, *w2) && b1 == b2 && r1.abs_diff(*r2).is_none_or(|d| d <= 1),
            (Reservation::NotUntil { wait: w1 }, Reservation::NotUntil { wait: w2 }) => {
                close_d(*w1, *w2)
            }
            (x, y) => x == y,
        },
        (Answer::Peeked(x), Answer::Peeked(y)) => {
            let bucket =
                |p: &Option<llm_failover::BucketSnapshot>,
                 q: &Option<llm_failover::BucketSnapshot>| match (p, q) {
                    (None, None) => true,
                    (Some(p), Some(q)) => {
                        close(p.level, q.level)
                            && p.capacity == q.capacity
                            && close_d(p.window, q.window)
                            && close_i(p.reset, q.reset)
                    }
                    _ => false,
                };
            bucket(&x.requests, &y.requests)
                && bucket(&x.tokens, &y.tokens)
                && match (x.learned_rate, y.learned_rate) {
                    (None, None) => true,
                    (Some(a), Some(b)) => close(a, b),
                    _ => false,
                }
                && close_i(x.gate_until, y.gate_until)
                && match (x.wait, y.wait) {
                    (None, None) => true,
                    (Some(a), Some(b)) => close_d(a, b),
                    _ => false,
                }
                && x.token_room.abs_diff(y.token_room).is_none_or(|d| d <= 1)
        }
        _ => false,
    }
}

trait AbsDiff {
    fn abs_diff(self, other: Self) -> Option<u64>;
}

impl AbsDiff for Option<u64> {
    /// `Some(0)` when both are none, `None` when only one is.
    fn abs_diff(self, other: Self) -> Option<u64> {
        match (self, other) {
            (None, None) => Some(0),
            (Some(a), Some(b)) => Some(a.abs_diff(b)),
            _ => Some(u64::MAX),
        }
    }
}

async fn run(store: &dyn LimiterStore, ops: &[Op], t0: Instant) -> Vec<Answer> {
    let mut now = t0;
    let mut out = Vec::new();
    for op in ops {
        out.push(match op.clone() {
            Op::Reserve {
                key: k,
                limits,
                cost,
                max_wait,
            } => Answer::Reserved(
                store
                    .reserve(&key(k), &limits, cost, max_wait, now)
                    .await
                    .unwrap(),
            ),
            Op::Refund {
                key: k,
                requests,
                tokens,
            } => {
                store.refund(&key(k), requests, tokens, now).await.unwrap();
                Answer::Done
            }
            Op::Raise { key: k, t } => {
                store.raise(&key(k), *t, now).await.unwrap();
                Answer::Done
            }
            Op::Peek { key: k, cost } => {
                Answer::Peeked(store.peek(&key(k), cost, now).await.unwrap())
            }
            Op::Advance(d) => {
                now += d;
                Answer::Done
            }
        });
    }
    out
}

#[tokio::test]
async fn the_redis_store_answers_as_the_memory_store_does() {
    let redis = RedisServer::start();
    let t0 = Instant::now();
    let mut compared = 0;
    // Granted after a wait, refused for now, too large, peeks of stated buckets, of a
    // learned pace, of a gate: the sequences reach every branch.
    let mut seen = [0; 6];
    for seed in 0..40u64 {
        let ops = sequence(seed, 300, t0);
        let allowance = if seed % 4 == 3 {
            50 * MS
        } else {
            Duration::ZERO
        };
        let memory = MemoryStore::with_latency_allowance(allowance);
        let shared =
            RedisStore::new(SharedSettings::new(redis.url()).prefix(format!("seed{seed}")))
                .unwrap()
                .with_latency_allowance(allowance)
                .on_virtual_clock(t0)
                .without_probes();
        let a = run(&memory, &ops, t0).await;
        let b = run(&shared, &ops, t0).await;
        for x in &a {
            match x {
                Answer::Reserved(Reservation::Granted { wait, .. }) if !wait.is_zero() => {
                    seen[0] += 1
                }
                Answer::Reserved(Reservation::NotUntil { .. }) => seen[1] += 1,
                Answer::Reserved(Reservation::TooLarge { .. }) => seen[2] += 1,
                Answer::Peeked(p) if p.requests.is_some() && p.tokens.is_some() => seen[3] += 1,
                Answer::Peeked(p) if p.learned_rate.is_some() => seen[4] += 1,
                Answer::Peeked(p) if p.gate_until.is_some() => seen[5] += 1,
                _ => {}
            }
        }
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                same(x, y),
                "seed {seed}, op {i} {:?}:\n memory {x:?}\n redis  {y:?}",
                ops[i]
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 40 * 300);
    eprintln!("branches seen: {seen:?}");
    assert!(seen.iter().all(|&n| n >= 5), "{seen:?}");
}

#[tokio::test]
async fn one_probe_across_clients_after_a_gate_and_its_answer_releases_it() {
    let redis = RedisServer::start();
    let t0 = Instant::now();
    let stores: Vec<RedisStore> = (0..4)
        .map(|_| {
            RedisStore::new(SharedSettings::new(redis.url()))
                .unwrap()
                .on_virtual_clock(t0)
        })
        .collect();
    let k = key(0);
    let limits = Limits::none().with_rpm(600);
    let one = Demand::one_request();
    // A 429 seen by the first: a gate of 300 ms, for every client.
    let granted = stores[0]
        .reserve(&k, &limits, one, Duration::ZERO, t0)
        .await
        .unwrap();
    let Reservation::Granted { booking, .. } = granted else {
        panic!("{granted:?}")
    };
    let mut throttled = Tightening::default();
    throttled.gate_until = Some(t0 + 300 * MS);
    throttled.drain = Drain::every_minute();
    throttled.booking = Some(booking);
    stores[0].raise(&k, throttled, t0).await.unwrap();
    for s in &stores[1..] {
        let r = s
            .reserve(&k, &limits, one, Duration::ZERO, t0)
            .await
            .unwrap();
        assert!(
            matches!(r, Reservation::NotUntil { wait } if wait == 300 * MS),
            "{r:?}: the others wait for the gate"
        );
    }
    // Past the gate: all four ask at once; one probes, the others wait for its answer.
    let now = t0 + 350 * MS;
    let mut probes = Vec::new();
    for s in &stores {
        probes.push(
            s.reserve(&k, &limits, one, Duration::from_secs(5), now)
                .await
                .unwrap(),
        );
    }
    let granted: Vec<u64> = probes
        .iter()
        .filter_map(|r| match r {
            Reservation::Granted { booking, .. } => Some(*booking),
            _ => None,
        })
        .collect();
    assert_eq!(granted.len(), 1, "exactly one probe: {probes:?}");
    let polling = probes
        .iter()
        .filter(|r| matches!(r, Reservation::NotUntil { wait } if *wait == 250 * MS))
        .count();
    assert_eq!(polling, 3, "the others look again in 250 ms: {probes:?}");
    // Its answer (a success) releases it, from whichever client it came: all may send.
    let mut answered = Tightening::default();
    answered.booking = Some(granted[0]);
    answered.report = Some(LimitReport::default());
    stores[2].raise(&k, answered, now).await.unwrap();
    for s in &stores {
        let r = s
            .reserve(&k, &limits, one, Duration::from_secs(5), now)
            .await
            .unwrap();
        assert!(matches!(r, Reservation::Granted { .. }), "{r:?}");
    }
}

#[tokio::test]
async fn redis_down_is_a_mode_and_it_is_used_again_when_it_returns() {
    let mut redis = RedisServer::start();
    let settings = |when_down| {
        SharedSettings::new(redis.url())
            .timeout(200 * MS)
            .when_down(when_down)
    };
    let wait = RedisStore::new(settings(WhenDown::Wait)).unwrap();
    let share = RedisStore::new(settings(WhenDown::LocalShare {
        processes: NonZeroU32::new(4).unwrap(),
    }))
    .unwrap();
    let k = key(1);
    let limits = Limits::none().with_rpm(40);
    let one = Demand::one_request();
    let t = Instant::now();
    assert!(matches!(
        wait.reserve(&k, &limits, one, Duration::ZERO, t)
            .await
            .unwrap(),
        Reservation::Granted { .. }
    ));
    redis.kill();
    // Fail closed: nothing admitted, a wait until the next try; never an error or a panic.
    let r = wait
        .reserve(&k, &limits, one, Duration::ZERO, t)
        .await
        .unwrap();
    assert!(
        matches!(r, Reservation::NotUntil { wait } if wait <= Duration::from_secs(1)),
        "{r:?}"
    );
    // A local share: 40 rpm over 4 processes is 10 here.
    let mut granted = 0;
    for _ in 0..20 {
        if let Reservation::Granted { .. } = share
            .reserve(&k, &limits, one, Duration::ZERO, t)
            .await
            .unwrap()
        {
            granted += 1;
        }
    }
    assert_eq!(granted, 10);
    let snap = share.peek(&k, one, t).await.unwrap();
    assert_eq!(snap.requests.map(|b| b.capacity), Some(10));

    redis.restart();
    // Tried again once the retry interval has passed on the caller's clock (`now`), with a
    // fresh connection: Redis is used again on the first try. The key's state was lost with
    // the restart, and this store had seen it: made anew, its bucket starts empty (one slot
    // every 1.5 s at 40 rpm), never full.
    let later = t + Duration::from_secs(2);
    let r = wait
        .reserve(&k, &limits, one, Duration::ZERO, later)
        .await
        .unwrap();
    assert!(
        matches!(r, Reservation::NotUntil { wait } if wait <= Duration::from_millis(1_500)),
        "an empty bucket after the restart: {r:?}"
    );
    let snap = wait.peek(&k, one, later).await.unwrap();
    assert_eq!(
        snap.requests.map(|b| b.capacity),
        Some(40),
        "Redis is used again"
    );
}

/// Issue 28's attack: around an outage, three processes overshot the quota they share. A
/// local share started full in every process the moment Redis went away, and a Redis
/// restarted without persistence handed out a full bucket nobody had stated.
#[tokio::test]
async fn an_outage_starts_a_share_from_what_was_left_and_a_restart_hands_out_no_full_bucket() {
    let mut redis = RedisServer::start();
    let share = |n| {
        RedisStore::new(
            SharedSettings::new(redis.url())
                .timeout(200 * MS)
                .when_down(WhenDown::LocalShare {
                    processes: NonZeroU32::new(n).unwrap(),
                }),
        )
        .unwrap()
    };
    let (a, b, c) = (share(4), share(4), share(4));
    let k = key(7);
    let limits = Limits::none().with_rpm(40);
    let one = Demand::one_request();
    let t = Instant::now();
    async fn take(s: &RedisStore, k: &LimitKey, limits: &Limits, n: usize, t: Instant) -> usize {
        let mut granted = 0;
        for _ in 0..n {
            let r = s.reserve(k, limits, Demand::one_request(), Duration::ZERO, t);
            if let Reservation::Granted { .. } = r.await.unwrap() {
                granted += 1;
            }
        }
        granted
    }
    // While Redis is up, `a` takes 26 of the 40 (more than its share of 10), then `c` one;
    // `b` nothing. 13 are left.
    assert_eq!(
        (
            take(&a, &k, &limits, 26, t).await,
            take(&c, &k, &limits, 1, t).await
        ),
        (26, 1)
    );
    redis.kill();
    // Down: `a` spent its share and more; `c` has the lower of its own share's rest (9) and
    // its part of what was left at its grant (13 / 4: 3); `b`, which never booked, knows
    // nothing else and has its whole share. 13 in all, what was left.
    let mut down = [0, 0, 0];
    for (i, s) in [&a, &b, &c].into_iter().enumerate() {
        down[i] = take(s, &k, &limits, 20, t).await;
    }
    assert_eq!(
        down,
        [0, 10, 3],
        "a local share starts from the lower of what its process had left and its part of \
         the shared level"
    );
    // Redis restarted without the state: `a` saw it, so it is made anew empty.
    redis.restart();
    let later = t + Duration::from_secs(2);
    let r = a
        .reserve(&k, &limits, one, Duration::ZERO, later)
        .await
        .unwrap();
    assert!(
        matches!(r, Reservation::NotUntil { .. }),
        "no full bucket after the restart: {r:?}"
    );
}

#[tokio::test]
async fn keys_are_namespaced_expire_and_hold_no_secret() {
    let redis = RedisServer::start();
    let store = RedisStore::new(SharedSettings::new(redis.url()).prefix("app7")).unwrap();
    let k = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini")
        .with_account(Some(Arc::from("tenant-42")));
    let now = Instant::now();
    store
        .reserve(
            &k,
            &Limits::none().with_rpm(10),
            Demand::one_request(),
            Duration::ZERO,
            now,
        )
        .await
        .unwrap();
    let keys = cli(&redis, &["KEYS", "*"]);
    assert_eq!(keys.trim(), "app7:{openai|gpt-4o-mini|tenant-42}:limits");
    let ttl: i64 = cli(
        &redis,
        &["PTTL", "app7:{openai|gpt-4o-mini|tenant-42}:limits"],
    )
    .trim()
    .parse()
    .unwrap();
    assert!(ttl > 86_400_000 && ttl <= 2 * 86_400_000, "{ttl}");
}

#[tokio::test]
async fn a_redis_that_refuses_the_password_is_a_config_error_that_never_shows_it() {
    let redis = RedisServer::start();
    assert_eq!(
        cli(&redis, &["CONFIG", "SET", "requirepass", "right-one"]).trim(),
        "OK"
    );
    let url = format!("redis://:wrong-one@127.0.0.1:{}", redis.port());
    let store = RedisStore::new(SharedSettings::new(url)).unwrap();
    let k = key(2);
    let limits = Limits::none().with_rpm(10);
    let now = Instant::now();
    let e = store
        .reserve(&k, &limits, Demand::one_request(), Duration::ZERO, now)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), llm_failover::ErrorKind::Config, "{e}");
    let text = format!("{e} {e:?}");
    assert!(
        text.contains("refused") && text.contains("password"),
        "{text}"
    );
    assert!(
        !text.contains("wrong-one") && !text.contains("right-one"),
        "{text}"
    );
}

#[tokio::test]
async fn no_slot_is_booked_across_a_pending_half_open_and_slots_booked_before_it_wait_or_probe() {
    let redis = RedisServer::start();
    let t0 = Instant::now();
    let a = RedisStore::new(SharedSettings::new(redis.url()))
        .unwrap()
        .on_virtual_clock(t0);
    let b = RedisStore::new(SharedSettings::new(redis.url()))
        .unwrap()
        .on_virtual_clock(t0);
    let k = key(0);
    // 60 a minute: the 61st slot is a second ahead, the 62nd two.
    let limits = Limits::none().with_rpm(60);
    let one = Demand::one_request();
    // b's first call starts its listening for gate announcements; once it listens, a slot it
    // books ahead is re-checked in Redis only after it heard a gate announced (below, it waits
    // for the announcement: pub/sub is a socket away, and the check must not race it).
    let mut booked = Vec::new();
    for i in 0..62 {
        if let Reservation::Granted { booking, wait, .. } = b
            .reserve(&k, &limits, one, Duration::from_secs(5), t0)
            .await
            .unwrap()
        {
            booked.push((booking, wait));
        }
        if i == 0 {
            tokio::time::timeout(Duration::from_secs(10), b.until(RedisStore::is_listening))
                .await
                .expect("never subscribed");
        }
    }
    let (late1, late2) = (booked[60].0, booked[61].0);
    assert_eq!(booked[61].1, 2 * Duration::from_secs(1));
    // Then a 429 elsewhere: "retry after 3 s".
    let mut throttled = Tightening::default();
    throttled.gate_until = Some(t0 + Duration::from_secs(3));
    a.raise(&k, throttled, t0).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        b.until(|b| b.announcements(&k) > 0),
    )
    .await
    .expect("the announcement never came");

    // Booked before it, due at 1 s and 2 s: stopped by the gate.
    let at = |s: u64| t0 + Duration::from_secs(s);
    assert_eq!(
        b.blocked(&k, late1, at(1)).await.unwrap(),
        Some(Duration::from_secs(2))
    );
    // A reservation during the gate, however patient, books nothing across it.
    let r = a
        .reserve(&k, &limits, one, Duration::from_secs(60), at(1))
        .await
        .unwrap();
    assert_eq!(
        r,
        Reservation::NotUntil {
            wait: Duration::from_secs(2)
        }
    );
    // After it: the first booked slot to go is the one probe; the other waits for its answer.
    assert_eq!(b.blocked(&k, late1, at(3)).await.unwrap(), None);
    assert_eq!(b.blocked(&k, late2, at(3)).await.unwrap(), Some(250 * MS));
    let r = a
        .reserve(&k, &limits, one, Duration::from_secs(60), at(3))
        .await
        .unwrap();
    assert!(
        matches!(r, Reservation::NotUntil { wait } if wait == 250 * MS),
        "{r:?}"
    );
    // Its answer releases it.
    let mut answered = Tightening::default();
    answered.booking = Some(late1);
    answered.report = Some(LimitReport::default());
    b.raise(&k, answered, at(3)).await.unwrap();
    assert_eq!(b.blocked(&k, late2, at(3)).await.unwrap(), None);
}

#[tokio::test]
async fn a_slot_booked_ahead_is_checked_in_redis_only_after_a_gate_was_announced() {
    let redis = RedisServer::start();
    let t0 = Instant::now();
    let store = || {
        RedisStore::new(SharedSettings::new(redis.url()))
            .unwrap()
            .on_virtual_clock(t0)
    };
    let (a, b) = (store(), store());
    let k = key(0);
    let limits = Limits::none().with_rpm(60);
    let one = Demand::one_request();
    // The first call starts listening; the subscription is a socket away.
    b.reserve(&k, &limits, one, Duration::ZERO, t0)
        .await
        .unwrap();
    let subscribed = b.until(RedisStore::is_listening);
    tokio::time::timeout(Duration::from_secs(10), subscribed)
        .await
        .expect("never subscribed");
    let ahead = |r: Reservation| match r {
        Reservation::Granted { booking, wait, .. } if !wait.is_zero() => booking,
        r => panic!("not booked ahead: {r:?}"),
    };
    let mut slots = Vec::new();
    for _ in 0..59 {
        b.reserve(&k, &limits, one, Duration::ZERO, t0)
            .await
            .unwrap();
    }
    for _ in 0..2 {
        slots.push(ahead(
            b.reserve(&k, &limits, one, Duration::from_secs(5), t0)
                .await
                .unwrap(),
        ));
    }
    let evalsha = || {
        let stats = cli(&redis, &["INFO", "commandstats"]);
        let line = stats
            .lines()
            .find(|l| l.starts_with("cmdstat_evalsha:"))
            .unwrap_or_default()
            .to_owned();
        line.split("calls=")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Nothing announced: the first slot goes without a call.
    let calls = evalsha();
    assert_eq!(
        b.blocked(&k, slots[0], t0 + Duration::from_secs(1))
            .await
            .unwrap(),
        None
    );
    assert_eq!(evalsha(), calls, "no round trip for a quiet key");
    // A gate from another client: announced, heard, and the second slot is checked and held.
    let mut throttled = Tightening::default();
    throttled.gate_until = Some(t0 + Duration::from_secs(5));
    a.raise(&k, throttled, t0 + Duration::from_secs(1))
        .await
        .unwrap();
    let heard = b.until(|b| b.announcements(&k) > 0);
    tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .expect("the announcement never came");
    let at2 = t0 + Duration::from_secs(2);
    assert_eq!(
        b.blocked(&k, slots[1], at2).await.unwrap(),
        Some(Duration::from_secs(3))
    );
    assert_eq!(evalsha(), calls + 2, "the raise and the check");
}

/// Books one request on `k` now: the booking's number (it must be granted).
async fn booked(store: &RedisStore, k: &LimitKey, limits: &Limits, now: Instant) -> u64 {
    match store
        .reserve(k, limits, Demand::one_request(), Duration::ZERO, now)
        .await
        .unwrap()
    {
        Reservation::Granted { booking, .. } => booking,
        other => panic!("granted, not {other:?}"),
    }
}

/// One store call per attempt: an answer's report (and its token reconciliation) is held
/// back and travels with the next reservation on its key; the other processes hear it then,
/// or when the store flushes. A 429's drain and gate go at once.
#[tokio::test]
async fn an_answers_report_travels_with_the_next_reservation_one_call_per_attempt() {
    let redis = RedisServer::start();
    let settings = SharedSettings::new(redis.url()).prefix("held");
    let a = RedisStore::new(settings.clone()).unwrap();
    let b = RedisStore::new(settings).unwrap();
    let k = key(0);
    let limits = Limits::none().with_rpm(6_000);
    let one = Demand::one_request();
    let stated = |remaining: u64, now: Instant| {
        let mut r = LimitReport::default();
        r.requests = Some(Window {
            limit: Some(500),
            remaining: Some(remaining),
            reset_at: Some(now + Duration::from_secs(60)),
            per: Per::Minute,
        });
        r
    };
    // The script loaded, the counts from zero.
    a.peek(&key(1), one, Instant::now()).await.unwrap();
    cli(&redis, &["CONFIG", "RESETSTAT"]);

    const N: u64 = 20;
    for i in 0..N {
        let now = Instant::now();
        let booking = booked(&a, &k, &limits, now).await;
        let mut answered = Tightening::default();
        answered.report = Some(stated(400 - i, now));
        answered.booking = Some(booking);
        answered.tokens_back = 5;
        // Held: nothing is sent now (the raise does not even yield to the runtime).
        a.raise(&k, answered, now).await.unwrap();
    }
    assert_eq!(
        redis.script_calls(),
        N,
        "one call per attempt, its report held"
    );
    // Another process does not see the last report yet: it has A's 19th (400 - 18 = 382
    // remaining, less the booking in flight since).
    let seen = |s: LimitSnapshot| s.requests.map(|b| b.level.round() as u64);
    let before = seen(b.peek(&k, one, Instant::now()).await.unwrap());
    assert_eq!(before, Some(381));
    // The next reservation carries it: 381 - 1 booked now.
    a.reserve(&k, &limits, one, Duration::ZERO, Instant::now())
        .await
        .unwrap();
    assert_eq!(redis.script_calls(), N + 2, "b's peek and a's reservation");
    let after = seen(b.peek(&k, one, Instant::now()).await.unwrap());
    assert_eq!(after, Some(380));

    // A 429 goes at once, with what was held before it: b is stopped by its gate at once.
    let now = Instant::now();
    let booking = booked(&a, &k, &limits, now).await;
    let mut throttled = Tightening::default();
    throttled.gate_until = Some(now + Duration::from_secs(30));
    throttled.drain = Drain::every_minute();
    throttled.booking = Some(booking);
    a.raise(&k, throttled, now).await.unwrap();
    let gate = b.peek(&k, one, now).await.unwrap().gate_until;
    assert!(
        gate.is_some_and(|g| g > now + Duration::from_secs(29)),
        "{gate:?}"
    );

    // What is held when the client stops is sent by its flush.
    let k2 = key(2);
    let now = Instant::now();
    let booking = booked(&a, &k2, &limits, now).await;
    let mut answered = Tightening::default();
    answered.report = Some(stated(42, now));
    answered.booking = Some(booking);
    a.raise(&k2, answered, now).await.unwrap();
    a.flush().await.unwrap();
    assert_eq!(seen(b.peek(&k2, one, now).await.unwrap()), Some(42));
}

/// The bulk lines of several processes take promised turns: an ask that cannot go now is
/// promised the instant the key can pay for it after every turn promised before it, the
/// holder goes at its turn in one call, a grant promises its line's next request a turn; an interactive booking still comes first (the turn it took is promised
/// again, behind the others); a promise nobody claims is forgotten a second after its turn.
#[tokio::test]
async fn bulk_lines_of_several_processes_take_promised_turns() {
    let redis = RedisServer::start();
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let stores: Vec<RedisStore> = (0..4)
        .map(|_| {
            RedisStore::new(SharedSettings::new(redis.url()).prefix("turns"))
                .unwrap()
                .on_virtual_clock(t0)
                .without_probes()
        })
        .collect();
    let k = key(1);
    // One request a second; the minute's bucket spent at t0.
    let limits = Limits::none().with_rpm(60);
    let one = Demand::one_request();
    while let Reservation::Granted { .. } = stores[0]
        .reserve(&k, &limits, one, Duration::ZERO, t0)
        .await
        .unwrap()
    {}
    let close = |got: Duration, want_ms: u64| got.as_millis().abs_diff(u128::from(want_ms)) <= 5;
    // Four fresh asks at t0: four turns, a second apart.
    let mut turns = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        let (r, turn) = s.take_turn(&k, &limits, one, None, t0).await.unwrap();
        let turn = turn.expect("a promised turn");
        assert!(
            matches!(r, Reservation::NotUntil { wait } if wait == turn.wait),
            "{r:?}"
        );
        assert!(
            close(turn.wait, 1_000 * (i as u64 + 1)),
            "store {i}: {turn:?}"
        );
        turns.push(turn);
    }
    // The first goes at its turn, in one call, and its line's next is promised after the
    // four: at 5 s.
    let (r, next) = stores[0]
        .take_turn(&k, &limits, one, Some(turns[0].number), at(1_000))
        .await
        .unwrap();
    assert!(
        matches!(r, Reservation::Granted { wait, .. } if wait.is_zero()),
        "{r:?}"
    );
    let next = next.expect("the next one's turn");
    assert!(close(next.wait, 4_000), "{next:?}");
    // A fresh ask in between goes after every promise: at 6 s.
    let (r, fresh) = stores[3]
        .take_turn(&k, &limits, one, None, at(1_500))
        .await
        .unwrap();
    assert!(matches!(r, Reservation::NotUntil { .. }), "{r:?}");
    assert!(close(fresh.unwrap().wait, 4_500), "{fresh:?}");
    // An interactive request books the slot at 2 s ahead of the second line ...
    let r = stores[2]
        .reserve(&k, &limits, one, Duration::from_secs(10), at(1_900))
        .await
        .unwrap();
    assert!(
        matches!(r, Reservation::Granted { wait, .. } if close(wait, 100)),
        "{r:?}"
    );
    // ... which finds no room at its turn and is promised one behind the others (7 s).
    let (r, again) = stores[1]
        .take_turn(&k, &limits, one, Some(turns[1].number), at(2_000))
        .await
        .unwrap();
    assert!(matches!(r, Reservation::NotUntil { .. }), "{r:?}");
    assert!(close(again.unwrap().wait, 5_000), "{again:?}");
    // The third line never comes back for its turn (3 s): forgotten a second after it. At
    // 4.5 s the key holds 2.5 requests (4.5 refilled, 2 booked) and four live promises
    // (4 s, 5 s, 6 s, 7 s): a fresh ask needs 5, so its turn is 2.5 s away — 3.5 s if the
    // forgotten one still counted.
    let (r, late) = stores[2]
        .take_turn(&k, &limits, one, None, at(4_500))
        .await
        .unwrap();
    assert!(matches!(r, Reservation::NotUntil { .. }), "{r:?}");
    let late = late.unwrap();
    assert!(
        close(late.wait, 2_500),
        "behind the live promises only: {late:?}"
    );
}

/// Budgets' charges (issue 31) in Redis as in memory: the same sequence of charged
/// reservations and settlements gives the same answers — granted while the
/// ledgers cover the amounts, `OverBudget` naming the first that does not (and what it
/// holds), nothing booked anywhere on a refusal (neither the ledgers nor the buckets), and
/// settling gives back. While Redis is away, a charged request is admitted in neither mode;
/// when it comes back without its data, the ledgers are restored to what the store saw.
#[tokio::test]
async fn budget_charges_book_in_redis_as_in_memory_and_wait_for_redis_when_it_is_away() {
    use llm_failover::ratelimit::Charge;
    let mut redis = RedisServer::start();
    let t0 = Instant::now();
    let memory = MemoryStore::new();
    let shared = RedisStore::new(
        SharedSettings::new(redis.url())
            .prefix("budget")
            .timeout(200 * MS)
            .when_down(WhenDown::LocalShare {
                processes: NonZeroU32::new(2).unwrap(),
            }),
    )
    .unwrap()
    .on_virtual_clock(t0)
    .without_probes();
    // A day's ledger of 1,000 and a month's of 1,500: the first day's runs out first; on the
    // second day (from step 60) the month's does.
    let day_of = |step: u64, amount| {
        let name = if step < 60 {
            "2026-12-03"
        } else {
            "2026-12-04"
        };
        Charge::new(
            format!("environment/e/day/{name}"),
            1_000,
            amount,
            Duration::from_secs(600),
        )
    };
    let day = |amount| day_of(0, amount);
    let month = |amount| {
        Charge::new(
            "environment/e/month/2026-12",
            1_500,
            amount,
            Duration::from_secs(600),
        )
    };
    let k = key(0);
    let limits = Limits::none().with_rpm(5);
    let one = Demand::one_request();
    let mut rng = StdRng::seed_from_u64(31);
    let mut answers = [Vec::new(), Vec::new()];
    for step in 0..120 {
        let amount = rng.random_range(0..400);
        let charges = [day_of(step, amount), month(amount)];
        let now = t0 + Duration::from_secs(step);
        let back = rng.random_range(0..amount.max(1)) as i64;
        for (i, store) in [&memory as &dyn LimiterStore, &shared]
            .into_iter()
            .enumerate()
        {
            let r = store
                .reserve_charged(&k, &limits, one, &charges, Duration::ZERO, now)
                .await
                .unwrap();
            if matches!(r, Reservation::Granted { .. }) && step % 2 == 0 {
                let ledgers: Vec<(std::sync::Arc<str>, i64)> =
                    charges.iter().map(|c| (c.ledger.clone(), back)).collect();
                store.settle(&ledgers, now).await.unwrap();
            }
            answers[i].push(match r {
                Reservation::Granted { .. } => "granted".to_owned(),
                Reservation::NotUntil { .. } => "not until".to_owned(),
                other => format!("{other:?}"),
            });
        }
    }
    assert_eq!(answers[0], answers[1], "memory, then redis");
    let over = answers[0]
        .iter()
        .filter(|a| a.starts_with("OverBudget"))
        .count();
    let granted = answers[0].iter().filter(|a| *a == "granted").count();
    let throttled = answers[0].iter().filter(|a| *a == "not until").count();
    eprintln!("{granted} granted, {over} over budget, {throttled} not until");
    assert!(
        over >= 5 && granted >= 5 && throttled >= 5,
        "{:?}",
        answers[0]
    );
    assert!(
        answers[0].iter().any(|a| a.contains("charge: 1")),
        "the month's ledger refuses too"
    );
    let ledger = cli(
        &redis,
        &["GET", "budget:budget:environment/e/day/2026-12-03"],
    );
    let held: u64 = ledger.trim().parse().unwrap();
    assert!(held <= 1_000, "{ledger}");
    // A bulk line's turn is refused by the budget in the same call, and books nothing.
    let later = t0 + Duration::from_secs(300);
    let (r, _) = shared
        .take_turn_charged(&k, &limits, one, &[day(1_001 - held)], None, later)
        .await
        .unwrap();
    assert_eq!(
        r,
        Reservation::OverBudget {
            charge: 0,
            spent: held
        }
    );
    let (r, _) = shared
        .take_turn_charged(&k, &limits, one, &[day(1_000 - held)], None, later)
        .await
        .unwrap();
    assert!(matches!(r, Reservation::Granted { .. }), "{r:?}");
    let full = cli(
        &redis,
        &["GET", "budget:budget:environment/e/day/2026-12-03"],
    );
    assert_eq!(full.trim(), "1000");

    // Redis away: a charged request waits for it, even in the local-share mode; an uncharged
    // one gets its share.
    redis.kill();
    let later = t0 + Duration::from_secs(600);
    let r = shared
        .reserve_charged(&k, &limits, one, &[day(1)], Duration::ZERO, later)
        .await
        .unwrap();
    assert!(matches!(r, Reservation::NotUntil { .. }), "{r:?}");
    let r = shared
        .reserve(&k, &limits, one, Duration::ZERO, later)
        .await
        .unwrap();
    assert!(matches!(r, Reservation::Granted { .. }), "{r:?}");
    // A settlement while it is away is an error the router logs, never a panic.
    assert!(shared.settle(&[(day(1).ledger, 1)], later).await.is_err());

    // Redis back without its data: the ledgers this store saw are restored to what it saw
    // them hold — never started from 0, which would allow the day's whole cap again.
    redis.restart();
    let back = later + Duration::from_secs(5);
    let r = shared
        .reserve_charged(&k, &limits, one, &[day(1)], Duration::ZERO, back)
        .await
        .unwrap();
    assert_eq!(
        r,
        Reservation::OverBudget {
            charge: 0,
            spent: 1_000
        },
        "the full day's ledger is restored"
    );
    let restored = cli(
        &redis,
        &["GET", "budget:budget:environment/e/day/2026-12-03"],
    );
    assert_eq!(restored.trim(), "1000");
    // A ledger this store never saw starts from nothing.
    let fresh = Charge::new(
        "environment/e/day/2026-12-05",
        1_000,
        1_000,
        Duration::from_secs(600),
    );
    let r = shared
        .reserve_charged(&k, &Limits::none(), one, &[fresh], Duration::ZERO, back)
        .await
        .unwrap();
    assert!(matches!(r, Reservation::Granted { .. }), "{r:?}");
}
