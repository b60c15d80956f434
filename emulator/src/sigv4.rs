//! AWS Signature Version 4, checked as an AWS endpoint checks it: the request's own
//! `Authorization` names the access key, the credential scope and the headers it signed; the
//! canonical request is rebuilt from what arrived, signed again with the key's secret and
//! compared (docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html,
//! …/reference_sigv-create-signed-request.html).
//!
//! The steps, as the docs give them: the canonical request (method, the path URI-encoded a
//! second time — the path arrives encoded once — after removing dot segments and empty
//! segments, the query's pairs encoded and sorted, each signed header `name:value` with its
//! values trimmed and inner spaces collapsed, the signed header names, the payload's SHA-256
//! or `x-amz-content-sha256`), the string to sign (`AWS4-HMAC-SHA256`, `x-amz-date`, the scope
//! `date/region/service/aws4_request`, the canonical request's SHA-256), the signing key
//! (HMAC-SHA256 chained over `AWS4` + secret, date, region, service, `aws4_request`) and the
//! signature (hex HMAC of the string to sign). botocore's `SigV4Auth` builds the same.
//!
//! The refusals carry AWS's own messages ("Signature expired: … is now earlier than …",
//! "Credential should be scoped to correct service: 'bedrock'. ", the canonical string and
//! string to sign it expected after a mismatch); which exception each is, is the caller's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use percent_encoding::percent_decode_str;
use ring::{digest, hmac};

use crate::config::AwsCredentials;
use crate::headers::civil_from_days;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// How far a request's `x-amz-date` may be from the server's clock before AWS refuses it.
pub(crate) const MAX_SKEW: Duration = Duration::from_secs(5 * 60);

/// What arrived: method, path and query exactly as sent (still percent-encoded), headers,
/// body.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) query: Option<&'a str>,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: &'a [u8],
}

/// Why a request is not accepted as signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No `Authorization` header.
    Missing,
    /// `Authorization` or `x-amz-date` malformed or incomplete (AWS: an incomplete
    /// signature).
    Incomplete(String),
    /// An access key id (or session token) that is not the credentials'.
    Unrecognized,
    /// The scope, the clock or the signature is wrong (AWS: an invalid signature).
    Invalid(String),
}

/// Checks `req`'s signature for `creds` and `service` at `now`.
///
/// # Errors
///
/// The first [`Refusal`] that applies, in this order: no `Authorization`; parts of it or
/// `x-amz-date` missing or malformed; another access key id or session token; a scope of
/// another terminator, service, region or date; a date more than [`MAX_SKEW`] away from
/// `now`; `host` not signed; a signature that differs.
pub(crate) fn verify(
    req: &Request<'_>,
    creds: &AwsCredentials,
    service: &str,
    now: SystemTime,
) -> Result<(), Refusal> {
    let Some(auth) = header(req.headers, "authorization") else {
        return Err(Refusal::Missing);
    };
    let parts = parse_authorization(&auth);
    let amz_date = header(req.headers, "x-amz-date");
    let mut missing = String::new();
    for (name, value) in [
        ("Credential", parts.credential),
        ("Signature", parts.signature),
        ("SignedHeaders", parts.signed_headers),
    ] {
        if value.is_none() {
            missing.push_str(&format!(
                "Authorization header requires '{name}' parameter. "
            ));
        }
    }
    if amz_date.is_none() {
        missing.push_str(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' \
             header. ",
        );
    }
    let (Some(credential), Some(signature), Some(signed), Some(amz_date)) = (
        parts.credential,
        parts.signature,
        parts.signed_headers,
        amz_date,
    ) else {
        return Err(Refusal::Incomplete(format!(
            "{missing}Authorization={auth}"
        )));
    };
    let Some(signed_at) = parse_amz_date(&amz_date) else {
        return Err(Refusal::Incomplete(format!(
            "Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See \
             http://en.wikipedia.org/wiki/ISO_8601"
        )));
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let &[key_id, date, region, scope_service, terminator] = scope.as_slice() else {
        return Err(Refusal::Incomplete(format!(
            "Credential must have exactly 5 slash-delimited elements, e.g. \
             keyid/date/region/service/term, got '{credential}'"
        )));
    };
    if key_id != creds.access_key_id {
        return Err(Refusal::Unrecognized);
    }
    let token = header(req.headers, "x-amz-security-token");
    if token.as_deref() != creds.session_token.as_deref() {
        return Err(Refusal::Unrecognized);
    }
    if terminator != "aws4_request" {
        return Err(Refusal::Invalid(format!(
            "Credential should be scoped with a valid terminator: 'aws4_request', not \
             '{terminator}'."
        )));
    }
    if scope_service != service {
        return Err(Refusal::Invalid(format!(
            "Credential should be scoped to correct service: '{service}'. "
        )));
    }
    if region != creds.region {
        return Err(Refusal::Invalid(format!(
            "Credential should be scoped to a valid region, not '{region}'. "
        )));
    }
    if date != &amz_date[..8] {
        return Err(Refusal::Invalid(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date \
             from HTTP: '{date}' != '{}', from 'x-amz-date'.",
            &amz_date[..8]
        )));
    }
    check_clock(&amz_date, signed_at, now)?;
    let names: Vec<String> = signed.split(';').map(str::to_ascii_lowercase).collect();
    if !names.iter().any(|n| n == "host" || n == ":authority") {
        return Err(Refusal::Invalid(
            "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.".to_owned(),
        ));
    }
    let canonical = canonical_request(req, &names);
    let string_to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let key = signing_key(&creds.secret_access_key, date, region, service);
    let expected = hex(hmac::sign(&key, string_to_sign.as_bytes()).as_ref());
    if expected != signature {
        return Err(Refusal::Invalid(format!(
            "The request signature we calculated does not match the signature you provided. \
             Check your AWS Secret Access Key and signing method. Consult the service \
             documentation for details.\n\nThe Canonical String for this request should have \
             been\n'{canonical}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n"
        )));
    }
    Ok(())
}

/// The parts of `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…` (none of
/// them for another scheme).
#[derive(Debug, Default)]
struct AuthParts<'a> {
    credential: Option<&'a str>,
    signed_headers: Option<&'a str>,
    signature: Option<&'a str>,
}

fn parse_authorization(value: &str) -> AuthParts<'_> {
    let mut parts = AuthParts::default();
    let Some(rest) = value.trim().strip_prefix(ALGORITHM) else {
        return parts;
    };
    for item in rest.split(',') {
        let Some((name, v)) = item.trim().split_once('=') else {
            continue;
        };
        let v = Some(v.trim()).filter(|v| !v.is_empty());
        match name.trim() {
            "Credential" => parts.credential = v,
            "SignedHeaders" => parts.signed_headers = v,
            "Signature" => parts.signature = v,
            _ => {}
        }
    }
    parts
}

/// A header's values as the canonical request has them: each trimmed, inner runs of spaces
/// as one, joined with `,`; `None` when absent.
fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut values = headers.get_all(name).iter().peekable();
    values.peek()?;
    Some(
        values
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join(","),
    )
}

fn canonical_request(req: &Request<'_>, names: &[String]) -> String {
    let mut out = format!(
        "{}\n{}\n{}\n",
        req.method,
        canonical_uri(req.path),
        canonical_query(req.query)
    );
    for name in names {
        let value = header(req.headers, name).unwrap_or_default();
        out.push_str(&format!("{name}:{value}\n"));
    }
    out.push('\n');
    out.push_str(&names.join(";"));
    out.push('\n');
    let payload = header(req.headers, "x-amz-content-sha256")
        .unwrap_or_else(|| hex(digest::digest(&digest::SHA256, req.body).as_ref()));
    out.push_str(&payload);
    out
}

/// The path without dot segments and empty segments (a trailing `/` kept), encoded once
/// more.
fn canonical_uri(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for s in path.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let trailing = path.ends_with('/') && !segments.is_empty();
    let mut normalized = format!("/{}", segments.join("/"));
    if trailing {
        normalized.push('/');
    }
    uri_encode(normalized.as_bytes(), true)
}

/// The query's pairs, each name and value decoded then encoded strictly, sorted.
fn canonical_query(query: Option<&str>) -> String {
    let encode = |s: &str| uri_encode(&percent_decode_str(s).collect::<Vec<u8>>(), false);
    let mut pairs: Vec<(String, String)> = query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (encode(k), encode(v))
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// AWS's URI encoding: unreserved characters (`A-Z a-z 0-9 - _ . ~`) as they are, `/` too
/// when `keep_slash`, every other byte as `%XX` (upper-case hex).
fn uri_encode(bytes: &[u8], keep_slash: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let step = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
    };
    let k_date = step(format!("AWS4{secret}").as_bytes(), date);
    let k_region = step(k_date.as_ref(), region);
    let k_service = step(k_region.as_ref(), service);
    let k_signing = step(k_service.as_ref(), "aws4_request");
    hmac::Key::new(hmac::HMAC_SHA256, k_signing.as_ref())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_clock(amz_date: &str, signed_at: SystemTime, now: SystemTime) -> Result<(), Refusal> {
    let earliest = now.checked_sub(MAX_SKEW).unwrap_or(UNIX_EPOCH);
    let latest = now.checked_add(MAX_SKEW).unwrap_or(now);
    let now_text = amz_date_of(now);
    if signed_at < earliest {
        return Err(Refusal::Invalid(format!(
            "Signature expired: {amz_date} is now earlier than {} ({now_text} - 5 min.)",
            amz_date_of(earliest)
        )));
    }
    if signed_at > latest {
        return Err(Refusal::Invalid(format!(
            "Signature not yet current: {amz_date} is still later than {} ({now_text} + 5 \
             min.)",
            amz_date_of(latest)
        )));
    }
    Ok(())
}

/// `YYYYMMDDTHHMMSSZ` (ISO 8601 basic format, UTC), the form of `x-amz-date`.
pub(crate) fn amz_date_of(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}{mo:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Parses `YYYYMMDDTHHMMSSZ`; `None` for anything else (a date that does not exist too).
fn parse_amz_date(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = s.get(r)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, sec) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(i64::from(y), mo, d);
    if civil_from_days(days) != (i64::from(y), mo, d) || days < 0 {
        return None;
    }
    let secs = days as u64 * 86_400 + u64::from(h * 3600 + mi * 60 + sec);
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// (year, month, day) → days since 1970-01-01 (H. Hinnant's days-from-civil).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn creds(id: &str, secret: &str, token: Option<&str>) -> AwsCredentials {
        AwsCredentials {
            access_key_id: id.into(),
            secret_access_key: secret.into(),
            session_token: token.map(str::to_owned),
            region: "us-east-1".into(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn at(amz_date: &str) -> SystemTime {
        parse_amz_date(amz_date).unwrap()
    }

    /// The example of AWS's SigV4 documentation (IAM `ListUsers`, `AKIDEXAMPLE`), whose
    /// signature botocore's `SigV4Auth` computes too.
    #[test]
    fn accepts_the_aws_documentation_example() {
        let h = headers(&[
            ("host", "iam.amazonaws.com"),
            (
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            ),
            ("x-amz-date", "20150830T123600Z"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date, \
                 Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
            ),
        ]);
        let req = Request {
            method: "GET",
            path: "/",
            query: Some("Version=2010-05-08&Action=ListUsers"),
            headers: &h,
            body: b"",
        };
        let c = creds(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
        );
        assert_eq!(verify(&req, &c, "iam", at("20150830T123600Z")), Ok(()));
    }

    /// A Converse request as botocore 1.44.8 signs it (`SigV4Auth`, service `bedrock`, a
    /// session token, the model id's `:` sent as `%3A` and signed as `%253A`).
    fn botocore_converse() -> (HeaderMap, AwsCredentials) {
        let h = headers(&[
            ("host", "127.0.0.1:4010"),
            ("content-type", "application/json"),
            ("x-amz-date", "20260102T030405Z"),
            ("x-amz-security-token", "session-token-example"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20260102/us-east-1/bedrock/\
                 aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, \
                 Signature=41df3cfa31468023c21afe2c58d7afa581564485fee34456b569de00e70bcc23",
            ),
        ]);
        let c = creds(
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            Some("session-token-example"),
        );
        (h, c)
    }

    const CONVERSE_PATH: &str = "/bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse";
    const CONVERSE_BODY: &[u8] = br#"{"messages":[{"role":"user","content":[{"text":"Hello"}]}]}"#;

    fn converse(h: &HeaderMap) -> Request<'_> {
        Request {
            method: "POST",
            path: CONVERSE_PATH,
            query: None,
            headers: h,
            body: CONVERSE_BODY,
        }
    }

    #[test]
    fn accepts_a_converse_request_signed_by_botocore() {
        let (h, c) = botocore_converse();
        let now = at("20260102T030405Z");
        assert_eq!(verify(&converse(&h), &c, "bedrock", now), Ok(()));
    }

    #[test]
    fn a_changed_body_secret_or_path_is_a_mismatch_showing_the_canonical_request() {
        let (h, c) = botocore_converse();
        let now = at("20260102T030405Z");
        let mut req = converse(&h);
        req.body = br#"{"messages":[]}"#;
        match verify(&req, &c, "bedrock", now) {
            Err(Refusal::Invalid(m)) => {
                assert!(m.starts_with("The request signature we calculated does not match"));
                assert!(m.contains("/bedrock/model/anthropic.claude-3-haiku-20240307-v1%253A0/"));
                assert!(m.contains("20260102/us-east-1/bedrock/aws4_request"));
            }
            other => panic!("{other:?}"),
        }
        let mut wrong = c.clone();
        wrong.secret_access_key = "another".into();
        assert!(matches!(
            verify(&converse(&h), &wrong, "bedrock", now),
            Err(Refusal::Invalid(_))
        ));
        let mut moved = converse(&h);
        moved.path = "/bedrock/model/other/converse";
        assert!(matches!(
            verify(&moved, &c, "bedrock", now),
            Err(Refusal::Invalid(_))
        ));
    }

    #[test]
    fn another_key_or_session_token_is_unrecognized() {
        let (h, c) = botocore_converse();
        let now = at("20260102T030405Z");
        let mut other = c.clone();
        other.access_key_id = "AKIAOTHER".into();
        assert_eq!(
            verify(&converse(&h), &other, "bedrock", now),
            Err(Refusal::Unrecognized)
        );
        let mut no_token = c.clone();
        no_token.session_token = None;
        assert_eq!(
            verify(&converse(&h), &no_token, "bedrock", now),
            Err(Refusal::Unrecognized)
        );
    }

    #[test]
    fn refuses_a_clock_more_than_five_minutes_away() {
        let (h, c) = botocore_converse();
        let signed = at("20260102T030405Z");
        let req = converse(&h);
        let late = signed + MAX_SKEW + Duration::from_secs(1);
        match verify(&req, &c, "bedrock", late) {
            Err(Refusal::Invalid(m)) => assert_eq!(
                m,
                "Signature expired: 20260102T030405Z is now earlier than 20260102T030406Z \
                 (20260102T030906Z - 5 min.)"
            ),
            other => panic!("{other:?}"),
        }
        let early = signed - MAX_SKEW - Duration::from_secs(1);
        match verify(&req, &c, "bedrock", early) {
            Err(Refusal::Invalid(m)) => assert!(m.starts_with("Signature not yet current")),
            other => panic!("{other:?}"),
        }
        assert_eq!(verify(&req, &c, "bedrock", signed + MAX_SKEW), Ok(()));
    }

    #[test]
    fn refuses_another_scope_and_incomplete_authorizations() {
        let (h, c) = botocore_converse();
        let now = at("20260102T030405Z");
        let mut eu = c.clone();
        eu.region = "eu-west-1".into();
        assert!(matches!(
            verify(&converse(&h), &eu, "bedrock", now),
            Err(Refusal::Invalid(m)) if m.contains("valid region")
        ));
        assert!(matches!(
            verify(&converse(&h), &c, "s3", now),
            Err(Refusal::Invalid(m)) if m.contains("correct service: 's3'")
        ));
        let empty = HeaderMap::new();
        assert_eq!(
            verify(&converse(&empty), &c, "bedrock", now),
            Err(Refusal::Missing)
        );
        let bearer = headers(&[("authorization", "Bearer abc")]);
        match verify(&converse(&bearer), &c, "bedrock", now) {
            Err(Refusal::Incomplete(m)) => {
                assert!(m.contains("requires 'Credential' parameter"));
                assert!(m.contains("'X-Amz-Date' or a 'Date' header"));
                assert!(m.ends_with("Authorization=Bearer abc"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn canonical_paths_and_queries_follow_the_aws_rules() {
        assert_eq!(canonical_uri("/a/./b/../c//d/"), "/a/c/d/");
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(
            canonical_uri("/model/x%3A0/converse"),
            "/model/x%253A0/converse"
        );
        assert_eq!(canonical_query(Some("b=2&a=x y&a=1")), "a=1&a=x%20y&b=2");
        assert_eq!(canonical_query(Some("k=%2F~")), "k=%2F~");
    }

    #[test]
    fn amz_dates_round_trip_and_impossible_ones_are_refused() {
        let t = at("20240229T235959Z");
        assert_eq!(amz_date_of(t), "20240229T235959Z");
        assert_eq!(amz_date_of(UNIX_EPOCH), "19700101T000000Z");
        for bad in [
            "20230229T000000Z",
            "20240101T240000Z",
            "2024-01-01T00:00:00Z",
            "x",
        ] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }
}
