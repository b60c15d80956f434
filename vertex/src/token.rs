//! Access tokens: a service account's JWT exchanged at its `token_uri` for an OAuth 2 access
//! token, which is kept and used by every request until shortly before it expires.
//!
//! - **When to fetch** is a pure decision ([`plan`]) over the token's lifetime and the
//!   client's clock: use the token held; refresh it (the request that finds it due fetches a
//!   new one while the others go on with the one held, still valid); or fetch and wait
//!   (none held, or it expires within [`EXPIRY_MARGIN`]).
//! - **One fetch at a time** per key: the requests that must wait for a token wait for the
//!   one fetch in flight (an async mutex around the fetch; the token itself sits behind a
//!   plain lock held for a copy only), then find its token.
//! - **Answers**: a refused grant (`400 invalid_grant`, `invalid_scope`, a `401`) is `Auth`,
//!   terminal; a `429` is `RateLimited`; a `5xx`, a timeout or a connection error stays
//!   retryable. Neither the token nor the key nor the JWT is ever in an error, a log line or
//!   `Debug`.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use llm_failover_core::clock::Now;
use llm_failover_core::http::{Body, HttpRequest, RawResponse};
use llm_failover_core::{Credential, Error, ErrorKind, Result};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use tokio::time::Instant;

use crate::jwt::{self, JWT_BEARER};
use crate::key::ServiceAccount;

/// A token is refreshed this long before it expires (or a quarter of its lifetime before,
/// for a token that lives less than 20 minutes): Google's are valid an hour.
pub(crate) const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// A token this close to its expiry is not sent: the request could arrive after it.
pub(crate) const EXPIRY_MARGIN: Duration = Duration::from_secs(10);

/// How many keys' tokens are kept (a key per tenant, given per request): past it, the
/// oldest key's go.
const MAX_KEYS: usize = 16;

/// When a token was obtained and when it expires, on the client's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lifetime {
    pub(crate) obtained: Instant,
    pub(crate) expires: Instant,
}

impl Lifetime {
    /// When a refresh is due: [`REFRESH_BEFORE`] before it expires, or a quarter of its
    /// lifetime before when that is shorter.
    pub(crate) fn refresh_at(self) -> Instant {
        let life = self.expires.saturating_duration_since(self.obtained);
        self.expires - REFRESH_BEFORE.min(life / 4)
    }
}

/// What to do for a request about to be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Send the token held.
    Use,
    /// A refresh is due: fetch a new token if no other request is fetching one, else send
    /// the token held (it is still valid).
    Refresh,
    /// No token can be sent: wait for a new one.
    Fetch,
}

/// What to do at `now` with the token of `held` lifetime (`None`: no token yet).
pub(crate) fn plan(held: Option<Lifetime>, now: Instant) -> Plan {
    match held {
        None => Plan::Fetch,
        Some(l) if now + EXPIRY_MARGIN >= l.expires => Plan::Fetch,
        Some(l) if now >= l.refresh_at() => Plan::Refresh,
        Some(_) => Plan::Use,
    }
}

/// An access token and its lifetime.
#[derive(Clone)]
struct Token {
    value: SecretString,
    life: Lifetime,
}

/// The tokens of every key seen (the provider's configured one, those given per request).
#[derive(Default)]
pub(crate) struct Tokens {
    keys: Mutex<Vec<Arc<Slot>>>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Tokens").field("keys", &keys.len()).finish()
    }
}

/// One key, parsed, and its token.
struct Slot {
    /// The key file's text: which key this is.
    key: SecretString,
    account: ServiceAccount,
    held: Mutex<Option<Token>>,
    /// Held by the request fetching a token.
    fetching: tokio::sync::Mutex<()>,
}

impl Slot {
    fn held(&self) -> Option<Token> {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Fetches a token with a JWT signed at `now`; keeps and returns it.
    async fn fetch<F, Fut>(&self, now: Now, send: &F) -> Result<Token>
    where
        F: Fn(HttpRequest) -> Fut,
        Fut: Future<Output = Result<RawResponse>>,
    {
        let assertion =
            jwt::assertion(&self.account, now.wall).map_err(|m| Error::new(ErrorKind::Auth, m))?;
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", JWT_BEARER)
            .append_pair("assertion", &assertion)
            .finish();
        let mut req = HttpRequest::new(http::Method::POST, self.account.token_uri.clone())
            .header("accept", "application/json")?;
        req.body = Body::Bytes {
            bytes: Bytes::from(form),
            content_type: "application/x-www-form-urlencoded".to_owned(),
        };
        let raw = send(req).await?;
        let token = answer(&raw, now.instant, &self.account)?;
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = Some(token.clone());
        Ok(token)
    }
}

impl Tokens {
    /// The access token to send with `credential` (a service account's key file), fetched
    /// through `send` when none is held or the one held is due.
    ///
    /// # Errors
    ///
    /// `Config` when the key is no service-account key (naming where it came from); the
    /// token endpoint's refusal or failure (see the module documentation).
    pub(crate) async fn token<F, Fut>(
        &self,
        credential: &Credential,
        now: Now,
        send: F,
    ) -> Result<Credential>
    where
        F: Fn(HttpRequest) -> Fut,
        Fut: Future<Output = Result<RawResponse>>,
    {
        let slot = self.slot(credential)?;
        let held = slot.held();
        let token = match plan(held.as_ref().map(|t| t.life), now.instant) {
            Plan::Use => held,
            Plan::Refresh => match slot.fetching.try_lock() {
                // Another request is fetching: this one goes on with the token held.
                Err(_) => held,
                Ok(_fetching) => match slot.fetch(now, &send).await {
                    Ok(token) => Some(token),
                    // The token held is still valid: the next request due tries again.
                    Err(e) => {
                        tracing::debug!(
                            account = %slot.account.client_email,
                            error = %e,
                            "refreshing the access token failed; the one held is still valid"
                        );
                        held
                    }
                },
            },
            Plan::Fetch => {
                let _fetching = slot.fetching.lock().await;
                // The fetch this request waited for may have brought one.
                match slot.held() {
                    Some(t) if plan(Some(t.life), now.instant) != Plan::Fetch => Some(t),
                    _ => Some(slot.fetch(now, &send).await?),
                }
            }
        };
        match token {
            Some(t) => Ok(Credential::new(t.value.expose_secret())),
            None => Err(Error::new(ErrorKind::Auth, "no access token")),
        }
    }

    /// The slot of `credential`'s key, parsed once.
    fn slot(&self, credential: &Credential) -> Result<Arc<Slot>> {
        let text = credential.expose();
        {
            let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(slot) = keys.iter().find(|s| s.key.expose_secret() == text) {
                return Ok(Arc::clone(slot));
            }
        }
        let account = parse(credential)?;
        let slot = Arc::new(Slot {
            key: SecretString::from(text.to_owned()),
            account,
            held: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
        });
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        // Another request may have parsed the same key meanwhile: one slot per key.
        if let Some(slot) = keys.iter().find(|s| s.key.expose_secret() == text) {
            return Ok(Arc::clone(slot));
        }
        if keys.len() == MAX_KEYS {
            keys.remove(0);
        }
        keys.push(Arc::clone(&slot));
        Ok(slot)
    }
}

/// `credential` as a service account's key; a `Config` error naming where it came from and
/// what is wrong.
pub(crate) fn parse(credential: &Credential) -> Result<ServiceAccount> {
    ServiceAccount::parse(credential.expose()).map_err(|what| {
        Error::new(
            ErrorKind::Config,
            format!("the {} {what}", credential.source()),
        )
    })
}

/// The token endpoint's answer (RFC 6749, section 5.1).
#[derive(Deserialize)]
struct Granted {
    access_token: String,
    expires_in: f64,
}

/// A refusal (RFC 6749, section 5.2).
#[derive(Deserialize)]
struct Refused {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

/// The token in a 2xx answer received for a request sent at `sent`, or the error a refusal
/// is.
fn answer(raw: &RawResponse, sent: Instant, account: &ServiceAccount) -> Result<Token> {
    let at = &account.token_uri;
    if raw.is_success() {
        let granted: Granted = serde_json::from_slice(&raw.body).map_err(|_| {
            Error::new(
                ErrorKind::Decode,
                format!(
                    "the token endpoint {at} answered {} without a token",
                    raw.status
                ),
            )
        })?;
        let valid = (granted.expires_in.is_finite() && granted.expires_in > 0.0)
            .then(|| Duration::from_secs_f64(granted.expires_in.min(86_400.0)));
        let (Some(valid), false) = (valid, granted.access_token.is_empty()) else {
            return Err(Error::new(
                ErrorKind::Decode,
                format!("the token endpoint {at} answered a token without a lifetime"),
            ));
        };
        return Ok(Token {
            value: SecretString::from(granted.access_token),
            life: Lifetime {
                obtained: sent,
                expires: sent + valid,
            },
        });
    }
    let refused: Option<Refused> = serde_json::from_slice(&raw.body).ok();
    let kind = match raw.status {
        429 => ErrorKind::RateLimited,
        408 | 500..=599 => ErrorKind::Server,
        _ => ErrorKind::Auth,
    };
    let said = match &refused {
        Some(r) => {
            let mut said = format!(": {}", shorten(&r.error));
            if let Some(d) = r.error_description.as_deref().filter(|d| !d.is_empty()) {
                said.push_str(&format!(" ({})", shorten(d)));
            }
            said
        }
        None => String::new(),
    };
    let what = if kind == ErrorKind::Auth {
        format!(
            "the token endpoint {at} refused the JWT of service account `{}`",
            account.client_email
        )
    } else {
        format!("the token endpoint {at} did not grant a token")
    };
    let err =
        Error::new(kind, format!("{what}: HTTP {}{said}", raw.status)).with_status(raw.status);
    Err(match refused {
        Some(r) => err.with_code(shorten(&r.error)),
        None => err,
    })
}

/// At most 200 characters of what a token endpoint said.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::UNIX_EPOCH;

    use http::HeaderMap;

    use super::*;
    use crate::key::tests::key_json;

    const S: Duration = Duration::from_secs(1);

    /// The decision, for a token obtained at 0 and valid for an hour (Google's 3599 s) or
    /// for 4 minutes.
    #[tokio::test(start_paused = true)]
    async fn decides_when_to_refresh_by_the_tokens_lifetime() {
        let t0 = Instant::now();
        let hour = Lifetime {
            obtained: t0,
            expires: t0 + 3599 * S,
        };
        let short = Lifetime {
            obtained: t0,
            expires: t0 + 240 * S,
        };
        let table = [
            (None, 0, Plan::Fetch),
            (Some(hour), 0, Plan::Use),
            (Some(hour), 3298, Plan::Use),
            (Some(hour), 3299, Plan::Refresh),
            (Some(hour), 3588, Plan::Refresh),
            (Some(hour), 3589, Plan::Fetch),
            (Some(hour), 7200, Plan::Fetch),
            // A quarter of 4 minutes: a refresh after 3.
            (Some(short), 179, Plan::Use),
            (Some(short), 180, Plan::Refresh),
            (Some(short), 230, Plan::Fetch),
        ];
        for (held, at, want) in table {
            assert_eq!(plan(held, t0 + at * S), want, "{held:?} at {at} s");
        }
    }

    fn now(instant: Instant) -> Now {
        Now {
            instant,
            wall: UNIX_EPOCH + Duration::from_secs(1_767_323_045),
        }
    }

    fn granted(token: &str) -> RawResponse {
        let body =
            format!(r#"{{"access_token":"{token}","expires_in":3599,"token_type":"Bearer"}}"#);
        RawResponse::new(200, HeaderMap::new(), body)
    }

    /// Concurrent requests without a token wait for one fetch; a refresh is one fetch while
    /// the others use the token held.
    #[tokio::test(start_paused = true)]
    async fn one_fetch_at_a_time_for_concurrent_requests() {
        let tokens = Tokens::default();
        let key = Credential::new(key_json("http://127.0.0.1:9/token"));
        let sent = AtomicUsize::new(0);
        let (release, gate) = tokio::sync::watch::channel(false);
        let send = |req: HttpRequest| {
            let n = sent.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!(req.url.as_str(), "http://127.0.0.1:9/token");
            let mut gate = gate.clone();
            async move {
                // The fetch lasts until the test lets it end.
                let _ = gate.wait_for(|open| *open).await;
                Ok(granted(&format!("ya29.token-{n}")))
            }
        };
        let t0 = Instant::now();
        let all = futures_join((0..8).map(|_| tokens.token(&key, now(t0), &send)), async {
            tokio::task::yield_now().await;
            let _ = release.send(true);
        })
        .await;
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        for got in all {
            assert_eq!(got.unwrap().expose(), "ya29.token-1");
        }

        // Due for a refresh: the first request fetches, the others go on with token 1.
        let _ = release.send(false);
        let later = now(t0 + 3300 * S);
        let all = futures_join((0..4).map(|_| tokens.token(&key, later, &send)), async {
            tokio::task::yield_now().await;
            let _ = release.send(true);
        })
        .await;
        assert_eq!(sent.load(Ordering::SeqCst), 2);
        let values: Vec<String> = all
            .into_iter()
            .map(|c| c.unwrap().expose().to_owned())
            .collect();
        assert_eq!(values.iter().filter(|v| *v == "ya29.token-2").count(), 1);
        assert_eq!(values.iter().filter(|v| *v == "ya29.token-1").count(), 3);
        // Then everyone has the new one.
        let c = tokens.token(&key, later, &send).await.unwrap();
        assert_eq!(c.expose(), "ya29.token-2");
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

    /// Polls every future of `many` and `also` together; the results of `many` in order.
    async fn futures_join<F: Future>(
        many: impl Iterator<Item = F>,
        also: impl Future<Output = ()>,
    ) -> Vec<F::Output> {
        let many: Vec<_> = many.map(Box::pin).collect();
        let mut outs: Vec<Option<F::Output>> = many.iter().map(|_| None).collect();
        let mut many = many;
        let mut also = Box::pin(also);
        let mut also_done = false;
        std::future::poll_fn(|cx| {
            if !also_done {
                also_done = also.as_mut().poll(cx).is_ready();
            }
            for (f, out) in many.iter_mut().zip(outs.iter_mut()) {
                if out.is_none()
                    && let std::task::Poll::Ready(v) = f.as_mut().poll(cx)
                {
                    *out = Some(v);
                }
            }
            if outs.iter().all(Option::is_some) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        outs.into_iter()
            .map(|o| o.expect("every future ended"))
            .collect()
    }

    /// The token endpoint's answers, each as the kind of error it is.
    #[test]
    fn a_refused_grant_is_auth_a_server_error_stays_retryable() {
        let account =
            ServiceAccount::parse(&key_json("https://oauth2.googleapis.com/token")).unwrap();
        let t0 = tokio::time::Instant::now();
        let raw =
            |status: u16, body: &str| RawResponse::new(status, HeaderMap::new(), body.to_owned());
        let table = [
            (
                raw(
                    400,
                    r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
                ),
                ErrorKind::Auth,
            ),
            (
                raw(
                    400,
                    r#"{"error":"invalid_scope","error_description":"Invalid OAuth scope."}"#,
                ),
                ErrorKind::Auth,
            ),
            (
                raw(401, r#"{"error":"unauthorized_client"}"#),
                ErrorKind::Auth,
            ),
            (
                raw(429, r#"{"error":"rate_limit_exceeded"}"#),
                ErrorKind::RateLimited,
            ),
            (raw(500, "<html>oops</html>"), ErrorKind::Server),
            (raw(503, ""), ErrorKind::Server),
            (raw(200, "{}"), ErrorKind::Decode),
            (
                raw(200, r#"{"access_token":"ya29.x","expires_in":0}"#),
                ErrorKind::Decode,
            ),
        ];
        for (r, kind) in table {
            let err = answer(&r, t0, &account).err().expect("an error");
            assert_eq!(err.kind(), kind, "{} {err}", r.status);
        }
        let err = answer(&table_refusal(), t0, &account).err().unwrap();
        assert!(err.is_terminal());
        assert_eq!(err.code(), Some("invalid_grant"));
        assert!(err.message().contains("Invalid JWT Signature."), "{err}");
        assert!(err.message().contains("vertex@emulator-project"), "{err}");
        let ok = answer(&granted("ya29.ok"), t0, &account).ok().unwrap();
        assert_eq!(ok.life.expires, t0 + 3599 * S);
    }

    fn table_refusal() -> RawResponse {
        RawResponse::new(
            400,
            HeaderMap::new(),
            r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
        )
    }
}
