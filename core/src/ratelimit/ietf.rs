//! The IETF draft `RateLimit` / `RateLimit-Policy` fields (draft-ietf-httpapi-ratelimit-headers)
//! and their older separate forms (`RateLimit-Limit`, `RateLimit-Remaining`,
//! `RateLimit-Reset`), read generically and leniently.
//!
//! Drafts 08 and later: `RateLimit-Policy: "burst";q=100;w=60,"daily";q=1000;w=86400` and
//! `RateLimit: "burst";r=50;t=30` (lists of named items with parameters; `q` quota, `w` window
//! seconds, `qu` quota unit, `r` remaining, `t` seconds to reset). Draft 07:
//! `RateLimit: limit=100, remaining=50, reset=5` with `RateLimit-Policy: 100;w=60`. Drafts up
//! to 06: separate `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (delta seconds;
//! some servers send epoch seconds there, told apart by magnitude).
//!
//! Several policies can be stated; the window reported is the most constraining one: the
//! current entry with the fewest remaining (ties: the later reset), or without current
//! entries, the policy with the lowest rate.

use std::cmp::Reverse;
use std::time::Duration;

use reqwest::header::HeaderMap;

use super::duration::decimal_seconds;
use super::value::{after, any_reset, count, header, header_list, per_from_window_secs};
use super::{Per, Window};
use crate::clock::Now;

/// The request window stated by the IETF draft fields, if any.
pub(super) fn requests_window(headers: &HeaderMap, now: Now) -> Option<Window> {
    let all_policies: Vec<Policy> = header_list(headers, "ratelimit-policy")
        .map(|v| members(&v).iter().filter_map(Policy::from_member).collect())
        .unwrap_or_default();
    let mut currents: Vec<Current> = header_list(headers, "ratelimit")
        .map(|v| currents(&v))
        .unwrap_or_default();
    if currents.is_empty() {
        currents.extend(separate_fields(headers, now));
    }
    // Only request quotas map onto the request window (`qu` defaults to "requests").
    let is_requests = |p: &Policy| p.unit.as_deref().is_none_or(|u| u == "requests");
    currents.retain(|c| {
        all_policies
            .iter()
            .filter(|p| p.name.is_some() && p.name == c.name)
            .all(is_requests)
    });
    let policies: Vec<&Policy> = all_policies.iter().filter(|p| is_requests(p)).collect();

    let current = currents
        .iter()
        .min_by_key(|c| (c.remaining.unwrap_or(u64::MAX), Reverse(c.reset)));
    let policy = match current {
        Some(c) => policy_of(c, &policies),
        None => lowest_rate(&policies),
    };

    let window = Window {
        limit: policy
            .and_then(|p| p.quota)
            .or(current.and_then(|c| c.limit)),
        remaining: current.and_then(|c| c.remaining),
        reset_at: current.and_then(|c| c.reset_at(now)),
        per: policy
            .and_then(|p| p.window_secs)
            .or(current.and_then(|c| c.window_secs))
            .map_or(Per::Unknown, per_from_window_secs),
    };
    (!window.is_empty()).then_some(window)
}

/// One `RateLimit-Policy` entry.
#[derive(Debug)]
struct Policy {
    name: Option<String>,
    quota: Option<u64>,
    window_secs: Option<u64>,
    unit: Option<String>,
}

impl Policy {
    fn from_member(m: &Member<'_>) -> Option<Self> {
        if let Some(quota) = count(m.item) {
            // Drafts up to 07: `100;w=60`.
            return Some(Policy {
                name: None,
                quota: Some(quota),
                window_secs: m.param("w").and_then(count),
                unit: None,
            });
        }
        if m.item.contains('=') {
            return None;
        }
        Some(Policy {
            name: Some(m.item.to_owned()),
            quota: m.param("q").and_then(count),
            window_secs: m.param("w").and_then(count),
            unit: m.param("qu").map(str::to_ascii_lowercase),
        })
    }
}

/// The policy a current entry reports on: the one with its name (and, when the entry states a
/// limit, that quota), else the only policy there is when one of the two is unnamed.
fn policy_of<'a>(c: &Current, policies: &[&'a Policy]) -> Option<&'a Policy> {
    let named: Vec<&Policy> = policies
        .iter()
        .copied()
        .filter(|p| p.name == c.name)
        .collect();
    named
        .iter()
        .copied()
        .find(|p| c.limit.is_none() || p.quota == c.limit)
        .or_else(|| named.first().copied())
        .or(match policies {
            [only] if only.name.is_none() || c.name.is_none() => Some(*only),
            _ => None,
        })
}

fn lowest_rate<'a>(policies: &[&'a Policy]) -> Option<&'a Policy> {
    let rate = |p: &Policy| match (p.quota, p.window_secs) {
        (Some(q), Some(w)) if w > 0 => q as f64 / w as f64,
        _ => f64::INFINITY,
    };
    policies
        .iter()
        .copied()
        .min_by(|a, b| rate(a).total_cmp(&rate(b)))
}

/// One current-state entry (`RateLimit` member, or the separate fields).
#[derive(Debug, Default)]
struct Current {
    name: Option<String>,
    limit: Option<u64>,
    remaining: Option<u64>,
    reset: Option<Reset>,
    window_secs: Option<u64>,
}

/// When the quota resets: seconds from now (`t=`, `reset=`) or an instant already converted
/// (`RateLimit-Reset`, which some servers send as an epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reset {
    After(Duration),
    At(tokio::time::Instant),
}

impl Current {
    fn reset_at(&self, now: Now) -> Option<tokio::time::Instant> {
        match self.reset? {
            Reset::After(d) => after(now, d),
            Reset::At(at) => Some(at),
        }
    }
}

fn currents(value: &str) -> Vec<Current> {
    let members = members(value);
    if members.iter().any(|m| m.item.contains('=')) {
        // Draft 07 dictionary: `limit=100, remaining=50, reset=5`.
        let mut c = Current::default();
        for m in &members {
            let Some((key, v)) = m.item.split_once('=') else {
                continue;
            };
            let v = unquote(v);
            match key.trim().to_ascii_lowercase().as_str() {
                "limit" => c.limit = count(v),
                "remaining" => c.remaining = count(v),
                "reset" => c.reset = decimal_seconds(v).map(Reset::After),
                _ => {}
            }
        }
        return vec![c];
    }
    members
        .iter()
        .filter(|m| count(m.item).is_none())
        .map(|m| Current {
            name: Some(m.item.to_owned()),
            limit: None,
            remaining: m.param("r").and_then(count),
            reset: m.param("t").and_then(decimal_seconds).map(Reset::After),
            window_secs: None,
        })
        .collect()
}

/// `RateLimit-Limit` / `-Remaining` / `-Reset` (drafts up to 06).
fn separate_fields(headers: &HeaderMap, now: Now) -> Option<Current> {
    let mut c = Current::default();
    if let Some(v) = header_list(headers, "ratelimit-limit") {
        // `10` or `10, 10;w=1, 50;w=60`: the first member is the limit; a member with that
        // quota and a `w` parameter says its window.
        let ms = members(&v);
        c.limit = ms.first().and_then(|m| count(m.item));
        c.window_secs = ms
            .iter()
            .filter(|m| c.limit.is_some() && count(m.item) == c.limit)
            .find_map(|m| m.param("w").and_then(count));
    }
    c.remaining = header(headers, "ratelimit-remaining").and_then(count);
    c.reset = header(headers, "ratelimit-reset")
        .and_then(|v| any_reset(v, now))
        .map(Reset::At);
    (c.limit.is_some() || c.remaining.is_some() || c.reset.is_some()).then_some(c)
}

/// A list member: the bare item (unquoted) and its `;key=value` parameters.
#[derive(Debug)]
struct Member<'a> {
    item: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> Member<'a> {
    fn param(&self, key: &str) -> Option<&'a str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| *v)
    }
}

fn members(value: &str) -> Vec<Member<'_>> {
    split_outside_quotes(value, ',')
        .into_iter()
        .filter_map(|raw| {
            let mut parts = split_outside_quotes(raw, ';').into_iter();
            let item = unquote(parts.next()?);
            if item.is_empty() {
                return None;
            }
            let params = parts
                .filter_map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    Some((k.trim(), unquote(v))).filter(|(k, _)| !k.is_empty())
                })
                .collect();
            Some(Member { item, params })
        })
        .collect()
}

/// Splits on `sep` except inside double quotes (with `\` escapes).
fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_quotes {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_quotes = false,
                _ => {}
            }
        } else if c == '"' {
            in_quotes = true;
        } else if c == sep {
            out.extend(s.get(start..i));
            start = i + c.len_utf8();
        }
    }
    out.extend(s.get(start..));
    out
}

fn unquote(v: &str) -> &str {
    let v = v.trim();
    v.strip_prefix('"')
        .and_then(|inner| inner.strip_suffix('"'))
        .unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::super::value::test_support::{Pairs, fixed_now, headers};
    use super::*;

    #[test]
    fn draft_fields_give_the_most_constraining_request_window() {
        let now = fixed_now();
        let w = |limit: Option<u64>, remaining: Option<u64>, reset_secs: Option<u64>, per| {
            Some(Window {
                limit,
                remaining,
                reset_at: reset_secs.map(|s| now.instant + Duration::from_secs(s)),
                per,
            })
        };
        let cases: &[(Pairs, Option<Window>)] = &[
            // https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-ratelimit-headers-10
            // (examples: RateLimit-Policy "default";q=100;w=10 / RateLimit "default";r=50;t=30)
            (
                &[
                    ("RateLimit-Policy", "\"default\";q=100;w=10"),
                    ("RateLimit", "\"default\";r=50;t=30"),
                ],
                w(Some(100), Some(50), Some(30), Per::Unknown),
            ),
            (
                &[
                    ("RateLimit-Policy", "\"permin\";q=100;w=60"),
                    ("RateLimit", "\"permin\";r=9;t=7"),
                ],
                w(Some(100), Some(9), Some(7), Per::Minute),
            ),
            // Several policies: the entry with the fewest remaining decides (here the daily).
            (
                &[
                    (
                        "RateLimit-Policy",
                        "\"burst\";q=100;w=60,\"daily\";q=1000;w=86400",
                    ),
                    ("RateLimit", "\"burst\";r=80;t=20, \"daily\";r=3;t=4000"),
                ],
                w(Some(1000), Some(3), Some(4000), Per::Day),
            ),
            // Repeated field lines combine like one list.
            (
                &[
                    ("RateLimit-Policy", "\"burst\";q=100;w=60"),
                    ("RateLimit-Policy", "\"daily\";q=1000;w=86400"),
                    ("RateLimit", "\"burst\";r=0;t=20"),
                    ("RateLimit", "\"daily\";r=500;t=4000"),
                ],
                w(Some(100), Some(0), Some(20), Per::Minute),
            ),
            // Equal remaining: the later reset is the more constraining.
            (
                &[("RateLimit", "\"a\";r=0;t=5, \"b\";r=0;t=50")],
                w(None, Some(0), Some(50), Per::Unknown),
            ),
            // Policies alone: the lowest sustained rate (1000/day < 100/min).
            (
                &[(
                    "RateLimit-Policy",
                    "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400",
                )],
                w(Some(1000), None, None, Per::Day),
            ),
            // Lenient spacing and token (unquoted) names, as some servers send.
            (
                &[
                    ("RateLimit-Policy", "100-in-1min; q=100; w=60"),
                    ("RateLimit", "100-in-1min; r=25; t=5"),
                ],
                w(Some(100), Some(25), Some(5), Per::Minute),
            ),
            // An unnamed entry takes the only policy; differently named ones do not match.
            (
                &[
                    ("RateLimit-Policy", "\"permin\";q=100;w=60"),
                    ("RateLimit", "limit=100, remaining=4, reset=9"),
                ],
                w(Some(100), Some(4), Some(9), Per::Minute),
            ),
            (
                &[
                    ("RateLimit-Policy", "\"b\";q=100;w=60"),
                    ("RateLimit", "\"a\";r=5;t=10"),
                ],
                w(None, Some(5), Some(10), Per::Unknown),
            ),
            // Quotas in other units do not describe requests.
            (
                &[
                    (
                        "RateLimit-Policy",
                        "\"bytes\";q=65536;qu=\"content-bytes\";w=60",
                    ),
                    ("RateLimit", "\"bytes\";r=0;t=5"),
                ],
                None,
            ),
            // Draft 07: a dictionary plus an unnamed policy
            // (https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-ratelimit-headers-07).
            (
                &[
                    ("RateLimit", "limit=100, remaining=50, reset=5"),
                    ("RateLimit-Policy", "100;w=60"),
                ],
                w(Some(100), Some(50), Some(5), Per::Minute),
            ),
            // Drafts up to 06: separate fields
            // (https://datatracker.ietf.org/doc/html/draft-ietf-httpapi-ratelimit-headers-06).
            (
                &[
                    ("RateLimit-Limit", "10"),
                    ("RateLimit-Remaining", "1"),
                    ("RateLimit-Reset", "7"),
                ],
                w(Some(10), Some(1), Some(7), Per::Unknown),
            ),
            (
                &[
                    ("RateLimit-Limit", "10, 10;w=1, 50;w=60"),
                    ("RateLimit-Remaining", "1"),
                    ("RateLimit-Reset", "7"),
                ],
                w(Some(10), Some(1), Some(7), Per::Unknown),
            ),
            (
                &[
                    ("RateLimit-Limit", "50, 50;w=60"),
                    ("RateLimit-Remaining", "0"),
                ],
                w(Some(50), Some(0), None, Per::Minute),
            ),
            // GitLab sends epoch seconds in RateLimit-Reset
            // (https://docs.gitlab.com/ee/administration/settings/user_and_ip_rate_limits.html).
            (
                &[
                    ("RateLimit-Limit", "60"),
                    ("RateLimit-Remaining", "0"),
                    ("RateLimit-Reset", "1717243260"),
                ],
                w(Some(60), Some(0), Some(60), Per::Unknown),
            ),
            // Bad values are dropped field by field.
            (
                &[
                    ("RateLimit", "\"d\";r=-1;t=30"),
                    ("RateLimit-Policy", "\"d\";q=1e400;w=60"),
                ],
                w(None, None, Some(30), Per::Minute),
            ),
            (&[("RateLimit", "\"d\";r=abc;t=-3")], None),
            (&[("RateLimit", "\"d\";r=NaN;t=inf")], None),
            (&[("RateLimit", ",,;;==\"\"")], None),
            (&[("RateLimit-Remaining", "-5")], None),
            (&[], None),
        ];
        for (pairs, want) in cases {
            assert_eq!(
                requests_window(&headers(pairs), now),
                *want,
                "headers {pairs:?}"
            );
        }
    }

    #[test]
    fn quoted_separators_do_not_split() {
        let ms = members("\"a,b;c\";r=1, \"d\\\"e\";r=2");
        let items: Vec<&str> = ms.iter().map(|m| m.item).collect();
        assert_eq!(items, ["a,b;c", "d\\\"e"]);
        assert_eq!(ms.first().and_then(|m| m.param("R")), Some("1"));
    }
}
