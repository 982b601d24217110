//! A dollar budget shared by every model client of a run, checked before each call.

use std::sync::Mutex;

use crate::types::ModelError;

/// A spending limit and the amount spent so far (share it with `Arc` between clients).
#[derive(Debug)]
pub struct Budget {
    limit_usd: f64,
    spent_usd: Mutex<f64>,
}

impl Budget {
    /// A budget of `limit_usd` with nothing spent.
    pub fn new(limit_usd: f64) -> Budget {
        Budget::with_spent(limit_usd, 0.0)
    }

    /// A budget of `limit_usd` of which `spent_usd` is already spent (a resumed run).
    pub fn with_spent(limit_usd: f64, spent_usd: f64) -> Budget {
        Budget {
            limit_usd,
            spent_usd: Mutex::new(spent_usd.max(0.0)),
        }
    }

    /// The limit in USD.
    pub fn limit_usd(&self) -> f64 {
        self.limit_usd
    }

    /// Dollars spent so far.
    pub fn spent_usd(&self) -> f64 {
        *self.lock()
    }

    /// Adds the cost of a finished call.
    pub fn charge(&self, cost_usd: f64) {
        if cost_usd.is_finite() && cost_usd > 0.0 {
            *self.lock() += cost_usd;
        }
    }

    /// Whether the spending reached the limit (no further call may start).
    pub fn exhausted(&self) -> bool {
        self.spent_usd() >= self.limit_usd
    }

    /// `Ok` while money is left, else the [`ModelError::Budget`] a refused call returns.
    pub fn check(&self) -> Result<(), ModelError> {
        let spent = self.spent_usd();
        if spent >= self.limit_usd {
            Err(ModelError::Budget(format!(
                "the run's budget_usd is spent (${spent:.4} of ${:.4}); the call was not made",
                self.limit_usd
            )))
        } else {
            Ok(())
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, f64> {
        self.spent_usd.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_until_exhausted() {
        let b = Budget::new(1.0);
        assert!(b.check().is_ok());
        b.charge(0.6);
        b.charge(f64::NAN);
        b.charge(-5.0);
        assert!(!b.exhausted());
        assert!((b.spent_usd() - 0.6).abs() < 1e-12);
        b.charge(0.4);
        assert!(b.exhausted());
        let e = b.check().unwrap_err();
        assert_eq!(e.class(), "budget");
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("budget_usd"), "{e}");
        let r = Budget::with_spent(2.0, 2.5);
        assert!(r.exhausted());
        assert_eq!(r.limit_usd(), 2.0);
        assert!(Budget::new(0.0).exhausted());
    }
}
