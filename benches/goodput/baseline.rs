//! B1's baseline clients (c) and (d): plain reqwest, the same JSON body as the SDK sends,
//! no buckets; between attempts they sleep on the shared clock.

use std::time::Duration;

use llm_failover::clock::{Clock, FastClock};
use rand::Rng;
use rand::rngs::SmallRng;

use super::Contender;
use super::common::prompts::{Item, MODEL};
use super::common::wire::{WireMessage, WireRequest, WireResponse};

/// Attempts after which a baseline client gives an item up.
const MAX_ATTEMPTS: u32 = 200;

/// One item through a baseline client: send until a 200 (or `MAX_ATTEMPTS`), sleeping on the
/// shared clock between attempts as the contender does.
pub(crate) async fn raw_item(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    item: &Item,
    clock: &FastClock,
    c: Contender,
    rng: &mut SmallRng,
) -> bool {
    let messages: Vec<WireMessage<'_>> = item
        .request
        .messages
        .iter()
        .map(|m| WireMessage {
            role: m.role.as_str(),
            content: &m.content,
        })
        .collect();
    let body = serde_json::to_vec(&WireRequest {
        model: MODEL,
        messages: &messages,
        max_tokens: item.request.max_tokens,
    })
    .expect("JSON");
    for attempt in 0..MAX_ATTEMPTS {
        let sent = http
            .post(url)
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await;
        let mut retry_after = None;
        if let Ok(resp) = sent {
            let status = resp.status().as_u16();
            retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64);
            if let Ok(bytes) = resp.bytes().await
                && status == 200
                && let Ok(r) = serde_json::from_slice::<WireResponse>(&bytes)
            {
                return r
                    .choices
                    .first()
                    .is_some_and(|c| c.message.content.is_some());
            }
        }
        let wait = match (c, retry_after) {
            (Contender::RetryAfter, Some(d)) => d,
            // Full jitter: uniform in [0, min(cap, base × 2^attempt)], base 1 s, cap 60 s.
            _ => {
                let ceiling = Duration::from_secs(1)
                    .saturating_mul(1 << attempt.min(16))
                    .min(Duration::from_secs(60));
                ceiling.mul_f64(rng.random::<f64>())
            }
        };
        clock.sleep_until(clock.now() + wait).await;
    }
    false
}
