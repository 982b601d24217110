//! `ModelClient`: concurrency cap, retries with backoff, timeouts, cost and accounting.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::budget::Budget;
use crate::config::ModelConfig;
pub use crate::prices::Prices;
use crate::types::{ChatRequest, ChatResponse, ModelError, Provider, Usage};

/// Token and cost totals of one role.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleUsage {
    /// Successful calls.
    pub calls: u64,
    /// Prompt tokens (including cached ones).
    pub input_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Completion tokens (reasoning included).
    pub output_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_input_tokens: u64,
    /// Reasoning (thinking) tokens among the completion tokens.
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Cost in USD.
    pub cost_usd: f64,
}

impl RoleUsage {
    /// The token counts as a [`Usage`].
    pub fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            cached_input_tokens: self.cached_input_tokens,
            output_tokens: self.output_tokens,
            cache_write_input_tokens: self.cache_write_input_tokens,
            reasoning_tokens: self.reasoning_tokens,
        }
    }
}

/// Accounting of a client since its creation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelStats {
    /// Logical calls made (`ModelClient::chat` invocations, successful or not).
    pub calls: u64,
    /// Extra attempts made after retryable errors.
    pub retries: u64,
    /// Calls that finally failed (after any retries).
    #[serde(default)]
    pub failed_calls: u64,
    /// Failed attempts by error class (`ModelError::class()`), retried ones included.
    pub faults: BTreeMap<String, u64>,
    /// Usage of successful calls by role (`Role::as_str()`).
    pub per_role: BTreeMap<String, RoleUsage>,
    /// Class and message of the last call that finally failed, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<(String, String)>,
}

impl ModelStats {
    /// The message of the last permanent failure (bad key, unknown model, replay miss).
    pub fn permanent_error(&self) -> Option<&str> {
        self.last_error
            .as_ref()
            .filter(|(class, _)| class == "permanent")
            .map(|(_, m)| m.as_str())
    }
}

impl ModelStats {
    /// Total cost over all roles, in USD.
    pub fn total_cost_usd(&self) -> f64 {
        self.per_role.values().map(|r| r.cost_usd).sum()
    }
    /// Total token usage over all roles.
    pub fn total_usage(&self) -> Usage {
        let mut u = Usage::default();
        for r in self.per_role.values() {
            u.add(&r.usage());
        }
        u
    }
}

/// The delay before retry number `retry` (0-based): full jitter over `base·2^retry`
/// capped at `max`, or the server's Retry-After (capped at `max`) when given.
pub fn backoff_delay(
    retry: u32,
    base_ms: u64,
    max_ms: u64,
    retry_after_sec: Option<f64>,
    rng: &mut impl Rng,
) -> Duration {
    if let Some(ra) = retry_after_sec.filter(|s| s.is_finite() && *s >= 0.0) {
        let ms = (ra * 1000.0).min(max_ms as f64);
        return Duration::from_millis(ms.ceil() as u64);
    }
    let cap = base_ms
        .saturating_mul(2u64.saturating_pow(retry))
        .min(max_ms);
    Duration::from_millis(rng.gen_range(0..=cap))
}

struct Inner {
    provider: Arc<dyn Provider>,
    sem: Semaphore,
    prices: Prices,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    max_retries: u32,
    max_malformed_retries: u32,
    timeout: Option<Duration>,
    backoff_base_ms: u64,
    backoff_max_ms: u64,
    budget: Option<Arc<Budget>>,
    stats: Mutex<ModelStats>,
}

/// A provider plus concurrency cap, retries, timeouts and accounting (cheap to clone).
#[derive(Clone)]
pub struct ModelClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClient")
            .field("provider", &self.describe())
            .finish_non_exhaustive()
    }
}

impl ModelClient {
    /// Wraps `provider` with the limits, retry policy and prices of `cfg`.
    pub fn new(provider: Arc<dyn Provider>, cfg: &ModelConfig) -> ModelClient {
        ModelClient::with_budget(provider, cfg, None)
    }

    /// Like [`ModelClient::new`], and every call first checks (then charges) `budget`.
    pub fn with_budget(
        provider: Arc<dyn Provider>,
        cfg: &ModelConfig,
        budget: Option<Arc<Budget>>,
    ) -> ModelClient {
        let timeout = Duration::try_from_secs_f64(cfg.timeout_sec)
            .ok()
            .filter(|d| !d.is_zero());
        ModelClient {
            inner: Arc::new(Inner {
                provider,
                sem: Semaphore::new(cfg.concurrency.max(1)),
                prices: Prices::from_config(cfg),
                temperature: cfg.temperature,
                max_tokens: cfg.max_tokens,
                max_retries: cfg.max_retries,
                max_malformed_retries: cfg.max_malformed_retries,
                timeout,
                backoff_base_ms: cfg.backoff_base_ms,
                backoff_max_ms: cfg.backoff_max_ms,
                budget,
                stats: Mutex::new(ModelStats::default()),
            }),
        }
    }

    /// The provider's description, e.g. `openai:gpt-4o`.
    pub fn describe(&self) -> String {
        self.inner.provider.describe()
    }

    /// Whether the config named no prices (costs are then "unknown", not $0).
    pub fn cost_unknown(&self) -> bool {
        self.inner.prices.unknown()
    }

    /// The shared budget this client checks, if any.
    pub fn budget(&self) -> Option<&Arc<Budget>> {
        self.inner.budget.as_ref()
    }

    /// A snapshot of the accounting so far.
    pub fn stats(&self) -> ModelStats {
        self.lock_stats().clone()
    }

    /// Performs one call with retries; the response carries its cost.
    pub async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let inner = &self.inner;
        let mut req = req.clone();
        if req.temperature.is_none() {
            req.temperature = inner.temperature;
        }
        if req.max_tokens.is_none() {
            req.max_tokens = inner.max_tokens;
        }
        self.lock_stats().calls += 1;
        let (mut transient, mut malformed, mut retry) = (0u32, 0u32, 0u32);
        loop {
            // Checked before every attempt: a retry is a paid call too.
            if let Some(Err(e)) = inner.budget.as_deref().map(Budget::check) {
                let mut st = self.lock_stats();
                *st.faults.entry(e.class().to_string()).or_default() += 1;
                st.failed_calls += 1;
                st.last_error = Some((e.class().to_string(), e.to_string()));
                return Err(e);
            }
            let err = match self.attempt(&req).await {
                Ok(mut resp) => {
                    resp.cost_usd = inner.prices.cost(&resp.usage);
                    if let Some(b) = &inner.budget {
                        b.charge(resp.cost_usd);
                    }
                    self.record_success(&req, &resp);
                    return Ok(resp);
                }
                Err(e) => e,
            };
            let within_budget = match &err {
                ModelError::Transient { .. } => {
                    transient += 1;
                    transient <= inner.max_retries
                }
                ModelError::Malformed(_) => {
                    malformed += 1;
                    malformed <= inner.max_malformed_retries
                }
                _ => false,
            };
            {
                let mut st = self.lock_stats();
                *st.faults.entry(err.class().to_string()).or_default() += 1;
                if !within_budget {
                    st.failed_calls += 1;
                    st.last_error = Some((err.class().to_string(), err.to_string()));
                } else {
                    st.retries += 1;
                }
            }
            if !within_budget {
                return Err(err);
            }
            let retry_after = match &err {
                ModelError::Transient {
                    retry_after_sec, ..
                } => *retry_after_sec,
                _ => None,
            };
            let delay = backoff_delay(
                retry,
                inner.backoff_base_ms,
                inner.backoff_max_ms,
                retry_after,
                &mut rand::thread_rng(),
            );
            retry += 1;
            tracing::warn!(
                provider = %self.describe(),
                role = req.role.as_str(),
                retry,
                delay_ms = delay.as_millis() as u64,
                "model call failed, retrying: {err}"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt under the concurrency cap and the timeout.
    async fn attempt(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let inner = &self.inner;
        let _permit = inner
            .sem
            .acquire()
            .await
            .map_err(|_| ModelError::Permanent("model client is shut down".to_string()))?;
        match inner.timeout {
            Some(t) => match tokio::time::timeout(t, inner.provider.chat(req)).await {
                Ok(r) => r,
                Err(_) => Err(ModelError::Transient {
                    message: format!("no answer within {:.1} s", t.as_secs_f64()),
                    retry_after_sec: None,
                }),
            },
            None => inner.provider.chat(req).await,
        }
    }

    fn record_success(&self, req: &ChatRequest, resp: &ChatResponse) {
        let mut st = self.lock_stats();
        let r = st
            .per_role
            .entry(req.role.as_str().to_string())
            .or_default();
        r.calls += 1;
        r.input_tokens += resp.usage.input_tokens;
        r.cached_input_tokens += resp.usage.cached_input_tokens;
        r.output_tokens += resp.usage.output_tokens;
        r.cache_write_input_tokens += resp.usage.cache_write_input_tokens;
        r.reasoning_tokens += resp.usage.reasoning_tokens;
        r.cost_usd += resp.cost_usd;
    }

    fn lock_stats(&self) -> std::sync::MutexGuard<'_, ModelStats> {
        self.inner
            .stats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Message, Role};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Fails with the queued errors, then answers with fixed usage.
    struct Flaky {
        errors: Mutex<Vec<ModelError>>,
        calls: AtomicUsize,
        seen: Mutex<Vec<ChatRequest>>,
        delay: Duration,
    }

    impl Flaky {
        fn new(mut errors: Vec<ModelError>) -> Arc<Flaky> {
            errors.reverse();
            Arc::new(Flaky {
                errors: Mutex::new(errors),
                calls: AtomicUsize::new(0),
                seen: Mutex::new(Vec::new()),
                delay: Duration::ZERO,
            })
        }
    }

    #[async_trait::async_trait]
    impl Provider for Flaky {
        fn describe(&self) -> String {
            "flaky:test".into()
        }
        async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.seen.lock().unwrap().push(req.clone());
            tokio::time::sleep(self.delay).await;
            if let Some(e) = self.errors.lock().unwrap().pop() {
                return Err(e);
            }
            Ok(ChatResponse {
                content: Some("ok".into()),
                tool_calls: vec![],
                usage: Usage {
                    input_tokens: 1_000_000,
                    cached_input_tokens: 400_000,
                    output_tokens: 100_000,
                    ..Default::default()
                },
                finish_reason: None,
                cost_usd: 0.0,
                opaque: vec![],
            })
        }
    }

    fn cfg() -> ModelConfig {
        ModelConfig {
            backoff_base_ms: 1,
            backoff_max_ms: 5,
            ..ModelConfig::default()
        }
    }

    fn req(role: Role) -> ChatRequest {
        ChatRequest {
            role,
            messages: vec![Message::user("hi")],
            tools: vec![],
            protocol: Default::default(),
            temperature: None,
            max_tokens: None,
            tool_choice: Default::default(),
        }
    }

    fn transient() -> ModelError {
        ModelError::Transient {
            message: "503".into(),
            retry_after_sec: None,
        }
    }

    #[test]
    fn backoff_is_capped_and_honours_retry_after() {
        let mut rng = rand::thread_rng();
        for retry in 0..40 {
            let d = backoff_delay(retry, 100, 1000, None, &mut rng);
            assert!(d <= Duration::from_millis(1000.min(100 << retry.min(20))));
        }
        assert_eq!(
            backoff_delay(0, 1, 5000, Some(2.5), &mut rng),
            Duration::from_millis(2500)
        );
        assert_eq!(
            backoff_delay(0, 1, 300, Some(100.0), &mut rng),
            Duration::from_millis(300)
        );
    }

    #[tokio::test]
    async fn retries_then_succeeds_and_accounts() {
        let p = Flaky::new(vec![transient(), ModelError::Malformed("x".into())]);
        let c = ModelConfig {
            price_input_per_mtok: 2.0,
            price_cached_input_per_mtok: Some(0.5),
            price_output_per_mtok: 10.0,
            ..cfg()
        };
        let client = ModelClient::new(p.clone(), &c);
        let r = client.chat(&req(Role::Debugger)).await.unwrap();
        assert!((r.cost_usd - 2.4).abs() < 1e-9, "{}", r.cost_usd);
        assert_eq!(p.calls.load(Ordering::SeqCst), 3);
        let s = client.stats();
        assert_eq!((s.calls, s.retries, s.failed_calls), (1, 2, 0));
        assert_eq!(s.faults.get("transient"), Some(&1));
        assert_eq!(s.faults.get("malformed"), Some(&1));
        let d = &s.per_role["debugger"];
        assert_eq!(
            (d.calls, d.input_tokens, d.cached_input_tokens),
            (1, 1_000_000, 400_000)
        );
        assert!((s.total_cost_usd() - 2.4).abs() < 1e-9);
        assert_eq!(client.describe(), "flaky:test");
    }

    #[tokio::test]
    async fn budgets_are_per_class_and_permanent_is_not_retried() {
        let p = Flaky::new(vec![transient(), transient(), transient()]);
        let client = ModelClient::new(
            p.clone(),
            &ModelConfig {
                max_retries: 2,
                ..cfg()
            },
        );
        let e = client.chat(&req(Role::CodeAgent)).await.unwrap_err();
        assert_eq!(e.class(), "transient");
        assert_eq!(p.calls.load(Ordering::SeqCst), 3);
        let s = client.stats();
        assert_eq!(
            (s.retries, s.failed_calls, s.faults["transient"]),
            (2, 1, 3)
        );
        assert!(s.per_role.is_empty());

        let p = Flaky::new(vec![ModelError::Permanent("no".into())]);
        let client = ModelClient::new(p.clone(), &cfg());
        let e = client.chat(&req(Role::CodeAgent)).await.unwrap_err();
        assert_eq!(e, ModelError::Permanent("no".into()));
        assert_eq!(p.calls.load(Ordering::SeqCst), 1);
        assert_eq!(client.stats().retries, 0);
        assert_eq!(
            client.stats().permanent_error(),
            Some("permanent model error: no")
        );
    }

    #[tokio::test]
    async fn sampling_defaults_applied_only_when_unset() {
        let p = Flaky::new(vec![]);
        let c = ModelConfig {
            temperature: Some(0.3),
            max_tokens: Some(77),
            ..cfg()
        };
        let client = ModelClient::new(p.clone(), &c);
        client.chat(&req(Role::Evolve)).await.unwrap();
        let mut r = req(Role::Evolve);
        r.temperature = Some(1.0);
        r.max_tokens = Some(5);
        client.chat(&r).await.unwrap();
        let seen = p.seen.lock().unwrap();
        assert_eq!(
            (seen[0].temperature, seen[0].max_tokens),
            (Some(0.3), Some(77))
        );
        assert_eq!(
            (seen[1].temperature, seen[1].max_tokens),
            (Some(1.0), Some(5))
        );
    }

    #[tokio::test]
    async fn timeout_becomes_transient() {
        let p = Arc::new(Flaky {
            errors: Mutex::new(vec![]),
            calls: AtomicUsize::new(0),
            seen: Mutex::new(vec![]),
            delay: Duration::from_millis(500),
        });
        let c = ModelConfig {
            timeout_sec: 0.05,
            max_retries: 1,
            ..cfg()
        };
        let client = ModelClient::new(p.clone(), &c);
        let e = client.chat(&req(Role::CodeAgent)).await.unwrap_err();
        assert_eq!(e.class(), "transient");
        assert_eq!(p.calls.load(Ordering::SeqCst), 2);
        assert_eq!(client.stats().faults["transient"], 2);
    }

    #[tokio::test]
    async fn shared_budget_refuses_calls_once_spent() {
        let p = Flaky::new(vec![]);
        let c = ModelConfig {
            price_input_per_mtok: 2.0,
            price_cached_input_per_mtok: Some(0.5),
            price_output_per_mtok: 10.0,
            ..cfg()
        };
        // Each call costs $2.40; two clients share a $4 budget.
        let budget = Arc::new(Budget::new(4.0));
        let a = ModelClient::with_budget(p.clone(), &c, Some(budget.clone()));
        let b = ModelClient::with_budget(p.clone(), &c, Some(budget.clone()));
        assert!(a.budget().is_some() && ModelClient::new(p.clone(), &c).budget().is_none());
        a.chat(&req(Role::CodeAgent)).await.unwrap();
        assert!((budget.spent_usd() - 2.4).abs() < 1e-9);
        b.chat(&req(Role::Evolve)).await.unwrap();
        assert!(budget.exhausted());
        for client in [&a, &b] {
            let e = client.chat(&req(Role::Debugger)).await.unwrap_err();
            assert_eq!(e.class(), "budget");
        }
        assert_eq!(
            p.calls.load(Ordering::SeqCst),
            2,
            "refused calls never reach the provider"
        );
        let s = a.stats();
        assert_eq!((s.calls, s.failed_calls, s.faults["budget"]), (2, 1, 1));

        // A retry is checked too: here the budget runs out during the first (failed) attempt.
        struct Spender(Arc<Budget>, AtomicUsize);
        #[async_trait::async_trait]
        impl Provider for Spender {
            fn describe(&self) -> String {
                "spender:test".into()
            }
            async fn chat(&self, _req: &ChatRequest) -> Result<ChatResponse, ModelError> {
                self.1.fetch_add(1, Ordering::SeqCst);
                self.0.charge(1.0);
                Err(transient())
            }
        }
        let budget = Arc::new(Budget::new(1.0));
        let sp = Arc::new(Spender(budget.clone(), AtomicUsize::new(0)));
        let c2 = ModelClient::with_budget(sp.clone(), &c, Some(budget));
        assert_eq!(
            c2.chat(&req(Role::CodeAgent)).await.unwrap_err().class(),
            "budget"
        );
        assert_eq!(
            sp.1.load(Ordering::SeqCst),
            1,
            "no retry once the budget is spent"
        );
        let s = c2.stats();
        assert_eq!(
            (s.retries, s.faults["transient"], s.faults["budget"]),
            (1, 1, 1)
        );
    }
}
