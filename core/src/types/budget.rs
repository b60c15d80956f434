//! Budgets: what an environment, a provider or a tenant may spend in a calendar day or month.
//!
//! A budget is a bucket whose unit is money: before a request is sent, admission reserves
//! its estimated cost (input tokens and `max_tokens` at the configured [`Price`](super::price::Price))
//! in every budget it falls under, in the same store call as its request and token buckets;
//! after the answer, the reported usage's cost replaces the estimate. Windows start again at
//! midnight (a day) or on the first of the month, in the budget's time zone (UTC unless
//! named).
//!
//! # Examples
//!
//! ```
//! use llm_failover::budget::Budget;
//!
//! let budget = Budget::usd_per_day(20.0).and_usd_per_month(400.0).in_time_zone("Europe/Paris");
//! assert_eq!(budget.usd_per_day, Some(20.0));
//! assert_eq!(budget.time_zone.as_deref(), Some("Europe/Paris"));
//! ```

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::price::{Cost, not_dollars};
use crate::error::{Error, Result};

/// At most this much a calendar day and/or month, in US dollars.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Budget {
    /// At most this much a calendar day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_day: Option<f64>,
    /// At most this much a calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_month: Option<f64>,
    /// The IANA time zone whose midnight starts a day (`"America/New_York"`); `None`: UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

impl Budget {
    /// At most `usd` a calendar day.
    pub fn usd_per_day(usd: f64) -> Self {
        Budget {
            usd_per_day: Some(usd),
            ..Budget::default()
        }
    }

    /// At most `usd` a calendar month.
    pub fn usd_per_month(usd: f64) -> Self {
        Budget {
            usd_per_month: Some(usd),
            ..Budget::default()
        }
    }

    /// Also at most `usd` a calendar day.
    #[must_use]
    pub fn and_usd_per_day(mut self, usd: f64) -> Self {
        self.usd_per_day = Some(usd);
        self
    }

    /// Also at most `usd` a calendar month.
    #[must_use]
    pub fn and_usd_per_month(mut self, usd: f64) -> Self {
        self.usd_per_month = Some(usd);
        self
    }

    /// Days and months start at midnight in `time_zone` (an IANA name, read from the system's
    /// tz database when the client is built) instead of UTC.
    #[must_use]
    pub fn in_time_zone(mut self, time_zone: impl Into<String>) -> Self {
        self.time_zone = Some(time_zone.into());
        self
    }

    /// What is wrong with this budget, if anything.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.usd_per_day.is_none() && self.usd_per_month.is_none() {
            return Some("a budget needs `usd_per_day`, `usd_per_month` or both".to_owned());
        }
        let figures = [
            ("usd_per_day", self.usd_per_day),
            ("usd_per_month", self.usd_per_month),
        ];
        if let Some(p) = not_dollars("an amount", &figures) {
            return Some(p);
        }
        if let Some(tz) = &self.time_zone
            && let Err(e) = jiff::tz::TimeZone::get(tz)
        {
            return Some(format!(
                "`time_zone` {tz:?} is not a time zone this system knows: {e}"
            ));
        }
        None
    }

    /// The budget, checked, as the ledgers of `scope` (`Config` naming `what` when it is
    /// wrong).
    pub(crate) fn resolve(&self, scope: Scope, what: &str) -> Result<Ledgers> {
        if let Some(p) = self.problem() {
            return Err(Error::config(format!("{what}: {p}")));
        }
        let tz = match &self.time_zone {
            Some(name) => jiff::tz::TimeZone::get(name)
                .map_err(|e| Error::config(format!("{what}: time zone {name:?}: {e}")))?,
            None => jiff::tz::TimeZone::UTC,
        };
        let mut caps = Vec::new();
        if let Some(usd) = self.usd_per_day {
            caps.push((Period::Day, Cost::from_usd(usd)));
        }
        if let Some(usd) = self.usd_per_month {
            caps.push((Period::Month, Cost::from_usd(usd)));
        }
        let windows = caps.iter().map(|_| Mutex::new(None)).collect();
        Ok(Ledgers {
            scope,
            caps,
            tz,
            windows,
        })
    }
}

/// Whose budget it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Scope {
    /// The environment's, by name.
    Environment(Arc<str>),
    /// A provider's, by id.
    Provider(Arc<str>),
    /// A tenant's in an environment: (environment, tenant).
    Tenant(Arc<str>, Arc<str>),
}

impl Scope {
    /// The ledger's name, the same in every process (a store key).
    pub(crate) fn ledger(&self) -> String {
        match self {
            Scope::Environment(e) => format!("environment/{e}"),
            Scope::Provider(p) => format!("provider/{p}"),
            Scope::Tenant(e, t) => format!("tenant/{e}/{t}"),
        }
    }

    /// The code of a refusal by this scope's budget ([`Error::code`](crate::Error::code)).
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Scope::Environment(_) => "environment_budget",
            Scope::Provider(_) => "provider_budget",
            Scope::Tenant(..) => "tenant_budget",
        }
    }

    /// Whether a spent budget of this scope ends the request at once (the environment's, a
    /// tenant's) rather than failing over (a provider's: another may fit).
    pub(crate) fn ends_request(&self) -> bool {
        !matches!(self, Scope::Provider(_))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Environment(e) => write!(f, "environment `{e}`"),
            Scope::Provider(p) => write!(f, "provider `{p}`"),
            Scope::Tenant(_, t) => write!(f, "tenant `{t}`"),
        }
    }
}

/// A calendar window of a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Period {
    Day,
    Month,
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Period::Day => "day",
            Period::Month => "month",
        })
    }
}

/// One scope's budget, checked: its caps per period, in its time zone, and the window each
/// was last in (named once per window, not per request).
#[derive(Debug)]
pub(crate) struct Ledgers {
    pub(crate) scope: Scope,
    pub(crate) caps: Vec<(Period, Cost)>,
    pub(crate) tz: jiff::tz::TimeZone,
    windows: Vec<Mutex<Option<Named>>>,
}

/// A window as last named: its ledger's name, its own, and when it starts and ends.
#[derive(Clone, Debug)]
struct Named {
    ledger: Arc<str>,
    window: Arc<str>,
    starts: SystemTime,
    ends: SystemTime,
}

/// One window of a budget at some instant: its ledger's name, its own (`2026-12-03`), and how
/// long until it ends.
#[derive(Clone, Debug)]
pub(crate) struct WindowAt {
    pub(crate) ledger: Arc<str>,
    pub(crate) window: Arc<str>,
    pub(crate) ends_in: Duration,
}

impl Ledgers {
    /// Cap `i`'s window at wall time `wall`: the one named last while `wall` is in it, else
    /// named now (jiff's calendar arithmetic, once per window and process).
    pub(crate) fn window_at(&self, i: usize, wall: SystemTime) -> Result<WindowAt> {
        let Some((period, _)) = self.caps.get(i) else {
            return Err(Error::config(format!(
                "budget of {}: no cap {i}",
                self.scope
            )));
        };
        let mut slot = self.windows[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = slot.as_ref().filter(|n| n.starts <= wall && wall < n.ends) {
            return Ok(WindowAt {
                ledger: n.ledger.clone(),
                window: n.window.clone(),
                ends_in: n.ends.duration_since(wall).unwrap_or_default(),
            });
        }
        let w = window(*period, &self.tz, wall)?;
        let named = Named {
            ledger: Arc::from(format!("{}/{period}/{}", self.scope.ledger(), w.name)),
            window: Arc::from(w.name),
            starts: wall - w.since_start,
            ends: wall + w.ends_in,
        };
        let at = WindowAt {
            ledger: named.ledger.clone(),
            window: named.window.clone(),
            ends_in: w.ends_in,
        };
        *slot = Some(named);
        Ok(at)
    }
}

/// The window of `period` that holds a wall time, as [`window`] names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// `2026-12-03`, `2026-12`.
    pub(crate) name: String,
    /// How long since it started (the last midnight, the first of the month, in its zone).
    pub(crate) since_start: Duration,
    /// How long until it ends.
    pub(crate) ends_in: Duration,
}

/// The window of `period` that holds `wall` in `tz`: its name (`2026-12-03`, `2026-12`), how
/// long since it started and until it ends (the next midnight, the first of the next month,
/// in `tz`).
///
/// # Errors
///
/// `Config` when `wall` is outside what a calendar can name (never for a clock of this
/// century).
pub(crate) fn window(period: Period, tz: &jiff::tz::TimeZone, wall: SystemTime) -> Result<Window> {
    let bad = |e: jiff::Error| Error::config(format!("budget window at {wall:?}: {e}"));
    let now = jiff::Timestamp::try_from(wall).map_err(bad)?;
    let date = now.to_zoned_datetime(tz.clone()).date();
    let (name, first, next) = match period {
        Period::Day => (date.to_string(), date, date.tomorrow().map_err(bad)?),
        Period::Month => (
            format!("{:04}-{:02}", date.year(), date.month()),
            date.first_of_month(),
            date.last_of_month().tomorrow().map_err(bad)?,
        ),
    };
    let at = |d: jiff::civil::Date| -> Result<jiff::Timestamp> {
        Ok(d.to_zoned_datetime(tz.clone()).map_err(bad)?.timestamp())
    };
    let since_start = Duration::try_from(now.duration_since(at(first)?)).unwrap_or_default();
    let ends_in = Duration::try_from(at(next)?.duration_since(now)).unwrap_or_default();
    Ok(Window {
        name,
        since_start,
        ends_in,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> SystemTime {
        let ts: jiff::Timestamp = rfc3339.parse().unwrap();
        SystemTime::try_from(ts).unwrap()
    }

    /// Days and months in UTC and in named zones, DST changes and a leap year included.
    #[test]
    fn a_window_is_a_calendar_day_or_month_in_its_time_zone() {
        let h = |n: u64| Duration::from_secs(n * 3600);
        let rows: &[(&str, &str, Period, &str, Duration)] = &[
            // (zone, now, period) → (name, until it ends)
            (
                "UTC",
                "2026-12-03T14:00:00Z",
                Period::Day,
                "2026-12-03",
                h(10),
            ),
            (
                "UTC",
                "2026-12-03T14:00:00Z",
                Period::Month,
                "2026-12",
                h(28 * 24 + 10),
            ),
            (
                "UTC",
                "2026-12-31T23:59:59Z",
                Period::Month,
                "2026-12",
                Duration::from_secs(1),
            ),
            (
                "UTC",
                "2028-02-28T00:00:00Z",
                Period::Month,
                "2028-02",
                h(2 * 24),
            ),
            // 23:00 UTC is already tomorrow in Paris (UTC+1 in winter).
            (
                "Europe/Paris",
                "2026-12-03T23:30:00Z",
                Period::Day,
                "2026-12-04",
                Duration::from_secs(23 * 3600 + 1800),
            ),
            // 03:00 UTC is still yesterday in New York (UTC−5).
            (
                "America/New_York",
                "2026-12-01T03:00:00Z",
                Period::Month,
                "2026-11",
                h(2),
            ),
            // The spring-forward day in New York has 23 hours.
            (
                "America/New_York",
                "2026-03-08T05:00:00Z",
                Period::Day,
                "2026-03-08",
                h(23),
            ),
            (
                "America/New_York",
                "2026-11-01T04:00:00Z",
                Period::Day,
                "2026-11-01",
                h(25),
            ),
        ];
        for (zone, now, period, name, left) in rows {
            let tz = jiff::tz::TimeZone::get(zone).unwrap();
            let got = window(*period, &tz, at(now)).unwrap();
            assert_eq!(
                (got.name.as_str(), got.ends_in),
                (*name, *left),
                "{zone} {now} {period}"
            );
            // Where it started, the window before it ends.
            let before = window(
                *period,
                &tz,
                at(now) - got.since_start - Duration::from_secs(1),
            );
            assert_ne!(before.unwrap().name, got.name, "{zone} {now} {period}");
            let start = window(*period, &tz, at(now) - got.since_start).unwrap();
            assert_eq!(start.name, got.name, "{zone} {now} {period}");
        }
    }

    #[test]
    fn a_budget_is_checked() {
        let rows: &[(Budget, Option<&str>)] = &[
            (Budget::usd_per_day(20.0), None),
            (Budget::usd_per_month(0.0), None),
            (Budget::default(), Some("needs `usd_per_day`")),
            (Budget::usd_per_day(-1.0), Some("`usd_per_day` must be")),
            (
                Budget::usd_per_day(1.0).and_usd_per_month(f64::NAN),
                Some("`usd_per_month` must be"),
            ),
            (
                Budget::usd_per_day(1.0).in_time_zone("Mars/Olympus"),
                Some("not a time zone"),
            ),
            (Budget::usd_per_day(1.0).in_time_zone("Asia/Tokyo"), None),
        ];
        for (b, want) in rows {
            let got = b.problem();
            match want {
                None => assert_eq!(got, None, "{b:?}"),
                Some(w) => assert!(
                    got.as_deref().is_some_and(|g| g.contains(w)),
                    "{b:?}: {got:?}"
                ),
            }
        }
        let l = Budget::usd_per_day(1.5)
            .and_usd_per_month(20.0)
            .resolve(Scope::Environment("prod".into()), "x")
            .unwrap();
        assert_eq!(
            l.caps,
            [
                (Period::Day, Cost::from_nano_usd(1_500_000_000)),
                (Period::Month, Cost::from_nano_usd(20_000_000_000)),
            ]
        );
    }
}
