//! Budgets in admission: what one attempt charges to the budgets it falls under — the
//! environment's, its provider's, its tenant's — and what a spent one means.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::budget::{Ledgers, Period, Scope};
use crate::error::{Error, Result};
use crate::id::ProviderId;
use crate::ratelimit::Charge;
use crate::types::price::Cost;

/// A ledger is kept this long past its window's end (a late settle still finds it; clocks of
/// several hosts disagree by a little).
const KEEP_AFTER: Duration = Duration::from_secs(86_400);

/// The environment's and the tenants' budgets (a provider's is on its entry).
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    environment: Option<Ledgers>,
    tenants: HashMap<String, Ledgers>,
    /// The (provider, model) pairs a budget applies to but no price is set for, each warned
    /// of once.
    unpriced: Mutex<HashSet<(ProviderId, String)>>,
}

/// What one attempt charges, and what each charge is about (for the error of a spent one):
/// nothing (no allocation, a word in a ticket) where no budget applies.
#[derive(Clone, Debug, Default)]
pub(crate) struct Charges(Option<Box<Charged>>);

#[derive(Clone, Debug, Default)]
struct Charged {
    list: Vec<Charge>,
    about: Vec<About>,
}

#[derive(Clone, Debug)]
struct About {
    scope: Scope,
    period: Period,
    window: Arc<str>,
    ends_in: Duration,
}

impl Budgets {
    pub(crate) fn new(environment: Option<Ledgers>, tenants: HashMap<String, Ledgers>) -> Self {
        Budgets {
            environment,
            tenants,
            unpriced: Mutex::default(),
        }
    }

    /// Whether a budget other than a provider's is set.
    pub(crate) fn any(&self) -> bool {
        self.environment.is_some() || !self.tenants.is_empty()
    }

    /// The budgets an attempt at a provider with `provider`'s budget, for `tenant`, falls
    /// under, in the order they are checked: the environment's, the tenant's, the provider's.
    pub(crate) fn applying<'a>(
        &'a self,
        provider: Option<&'a Ledgers>,
        tenant: Option<&str>,
    ) -> impl Iterator<Item = &'a Ledgers> {
        let tenant = tenant.and_then(|t| self.tenants.get(t));
        self.environment.iter().chain(tenant).chain(provider)
    }

    /// Says once per provider and model that a budget applies where no price is set: such
    /// requests cost nothing by our count, so no budget holds them back.
    pub(crate) fn warn_unpriced(&self, provider: &ProviderId, model: &str) {
        let mut seen = self.unpriced.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.insert((provider.clone(), model.to_owned())) {
            tracing::warn!(
                provider = %provider,
                model,
                "a budget applies to this model but it has no price: its requests cost nothing \
                 by our count and no budget holds them back; set its price"
            );
        }
    }
}

impl Charges {
    /// `amount` in every window of every one of `ledgers`, at wall time `wall`.
    pub(crate) fn of<'a>(
        ledgers: impl Iterator<Item = &'a Ledgers>,
        amount: Cost,
        wall: SystemTime,
    ) -> Result<Self> {
        let mut charges = Charged::default();
        for l in ledgers {
            for (i, &(period, cap)) in l.caps.iter().enumerate() {
                let w = l.window_at(i, wall)?;
                charges.list.push(Charge::new(
                    w.ledger,
                    cap.nano_usd(),
                    amount.nano_usd(),
                    w.ends_in + KEEP_AFTER,
                ));
                charges.about.push(About {
                    scope: l.scope.clone(),
                    period,
                    window: w.window,
                    ends_in: w.ends_in,
                });
            }
        }
        Ok(Charges(
            (!charges.list.is_empty()).then(|| Box::new(charges)),
        ))
    }

    /// The charges, in the order the store is asked to book them.
    pub(crate) fn list(&self) -> &[Charge] {
        self.0.as_ref().map_or(&[], |c| &c.list)
    }

    fn about(&self) -> &[About] {
        self.0.as_ref().map_or(&[], |c| &c.about)
    }

    /// The estimate charged (the same amount in every ledger), where a budget applies: the
    /// answer's `Spend::estimated`, not made twice.
    pub(crate) fn amount(&self) -> Option<Cost> {
        self.list().first().map(|c| Cost::from_nano_usd(c.amount))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// Whether the spent charge `i` ends the request (the environment's, a tenant's) rather
    /// than passing over its provider.
    pub(crate) fn ends_request(&self, i: usize) -> bool {
        self.about().get(i).is_none_or(|a| a.scope.ends_request())
    }

    /// The error of charge `i`, whose ledger holds `spent` already, found at `now`.
    pub(crate) fn spent(&self, i: usize, spent: u64, now: Instant) -> Error {
        let (Some(c), Some(a)) = (self.list().get(i), self.about().get(i)) else {
            return Error::config(format!(
                "a limiter store answered over budget for charge {i} of {}",
                self.list().len()
            ));
        };
        let message = format!(
            "the budget of {} for the {} {} ({}) cannot cover this request's estimated {}: \
             {} is spent or reserved; it starts again in {:.0}s",
            a.scope,
            a.period,
            a.window,
            Cost::from_nano_usd(c.cap),
            Cost::from_nano_usd(c.amount),
            Cost::from_nano_usd(spent),
            a.ends_in.as_secs_f64(),
        );
        Error::budget_exhausted(message, now + a.ends_in, a.ends_in).with_code(a.scope.code())
    }

    /// What to give back (> 0) or charge (< 0) in each ledger once the answer cost `actual`.
    pub(crate) fn settled(&self, actual: Cost) -> Vec<(Arc<str>, i64)> {
        self.list()
            .iter()
            .map(|c| {
                let back = i128::from(c.amount) - i128::from(actual.nano_usd());
                let back =
                    i64::try_from(back).unwrap_or(if back > 0 { i64::MAX } else { i64::MIN });
                (c.ledger.clone(), back)
            })
            .filter(|(_, back)| *back != 0)
            .collect()
    }
}
