//! Settings of the frontier APIs (reasoning models, the Responses API, prompt caching,
//! extended thinking): their validation, the model families they depend on, and the part
//! of them that goes into record/replay keys.

use serde_json::{json, Map, Value};

use crate::config::ModelConfig;

/// `max_tokens` sent to the Anthropic API when neither the request nor the config sets one
/// (the API requires it; extended thinking adds its budget on top).
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 8192;

/// Accepted `reasoning_effort` values (which of them a model takes varies).
pub const REASONING_EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];

/// Accepted `reasoning_summary` values (Responses API).
pub const REASONING_SUMMARIES: &[&str] = &["auto", "concise", "detailed"];

/// Accepted `max_tokens_field` values.
pub const MAX_TOKENS_FIELDS: &[&str] = &["auto", "max_tokens", "max_completion_tokens"];

/// Accepted `api` values of the openai provider.
pub const OPENAI_APIS: &[&str] = &["chat", "responses"];

/// Accepted `prompt_cache_ttl` values.
pub const CACHE_TTLS: &[&str] = &["5m", "1h"];

/// Smallest `thinking_budget_tokens` the Messages API takes.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// Request fields ahe builds itself; `extra_body` may not replace them.
const RESERVED_BODY_KEYS: &[&str] = &["model", "messages", "input", "tools", "instructions"];

/// Whether an OpenAI model name is a reasoning family (o1/o3/o4..., gpt-5*): those take
/// `max_completion_tokens` and only the default temperature. A provider prefix such as
/// OpenRouter's `openai/` is ignored.
pub fn is_reasoning_model(model: &str) -> bool {
    let m = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let o_series = m.starts_with('o') && m[1..].starts_with(|c: char| c.is_ascii_digit());
    o_series || m.starts_with("gpt-5")
}

/// The output-limit field an openai chat request uses for `cfg` (`auto` resolved).
pub fn max_tokens_field(cfg: &ModelConfig) -> &'static str {
    match cfg.max_tokens_field.as_deref() {
        Some("max_tokens") => "max_tokens",
        Some("max_completion_tokens") => "max_completion_tokens",
        _ if is_reasoning_model(&cfg.model) => "max_completion_tokens",
        _ => "max_tokens",
    }
}

fn check_choice(errs: &mut Vec<String>, field: &str, v: &Option<String>, allowed: &[&str]) {
    if let Some(v) = v {
        if !allowed.contains(&v.as_str()) {
            errs.push(format!(
                "{field}: `{v}` is not one of {}",
                allowed.join(", ")
            ));
        }
    }
}

impl ModelConfig {
    /// Checks the frontier-API fields, pushing one message per bad field.
    pub(crate) fn validate_frontier(&self, errs: &mut Vec<String>) {
        self.check_frontier_values(errs);
        self.check_provider_only_fields(errs);
        self.check_sampling_and_thinking(errs);
    }

    /// Checks the enumerated fields against their accepted values, `top_p`'s range and that
    /// `extra_body` replaces no field ahe builds.
    fn check_frontier_values(&self, errs: &mut Vec<String>) {
        check_choice(errs, "api", &self.api, OPENAI_APIS);
        check_choice(
            errs,
            "max_tokens_field",
            &self.max_tokens_field,
            MAX_TOKENS_FIELDS,
        );
        check_choice(
            errs,
            "reasoning_effort",
            &self.reasoning_effort,
            REASONING_EFFORTS,
        );
        check_choice(
            errs,
            "reasoning_summary",
            &self.reasoning_summary,
            REASONING_SUMMARIES,
        );
        check_choice(errs, "prompt_cache_ttl", &self.prompt_cache_ttl, CACHE_TTLS);
        if matches!(self.top_p, Some(p) if !(p.is_finite() && p > 0.0 && p <= 1.0)) {
            errs.push("top_p: must be a number in (0, 1]".to_string());
        }
        for k in self.extra_body.keys() {
            if RESERVED_BODY_KEYS.contains(&k.as_str()) {
                errs.push(format!(
                    "extra_body.{k}: ahe builds `{k}` itself; remove it from extra_body"
                ));
            }
        }
    }

    /// Checks that no field of one provider's API is set on a model of the other.
    fn check_provider_only_fields(&self, errs: &mut Vec<String>) {
        let p = self.provider.as_str();
        let openai_only = [
            ("api", self.api.is_some()),
            ("max_tokens_field", self.max_tokens_field.is_some()),
            ("reasoning_effort", self.reasoning_effort.is_some()),
            ("reasoning_summary", self.reasoning_summary.is_some()),
            ("extra_body", !self.extra_body.is_empty()),
        ];
        let anthropic_only = [
            ("prompt_cache", self.prompt_cache.is_some()),
            ("prompt_cache_ttl", self.prompt_cache_ttl.is_some()),
            (
                "thinking_budget_tokens",
                self.thinking_budget_tokens.is_some(),
            ),
        ];
        let groups: [(&str, &[(&str, bool)]); 2] =
            [("openai", &openai_only), ("anthropic", &anthropic_only)];
        for (only, fields) in groups {
            for (name, set) in fields.iter() {
                if *set && p != only && PROVIDERS_WITH_APIS.contains(&p) {
                    errs.push(format!(
                        "{name}: applies to provider `{only}` only (this model is `{p}`); remove it"
                    ));
                }
            }
        }
    }

    /// Checks that an OpenAI reasoning model keeps the default temperature and `top_p`, and
    /// that a thinking budget is at least the minimum and below `max_tokens`.
    fn check_sampling_and_thinking(&self, errs: &mut Vec<String>) {
        let p = self.provider.as_str();
        if p == "openai" && is_reasoning_model(&self.model) {
            for (name, v) in [("temperature", self.temperature), ("top_p", self.top_p)] {
                if matches!(v, Some(t) if t != 1.0) {
                    errs.push(format!(
                        "{name}: reasoning model `{}` accepts only the default; remove {name} \
                         from this model's section",
                        self.model
                    ));
                }
            }
        }
        if let Some(b) = self.thinking_budget_tokens {
            let max = self.max_tokens.unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS);
            if b < MIN_THINKING_BUDGET {
                errs.push(format!(
                    "thinking_budget_tokens: must be >= {MIN_THINKING_BUDGET} (got {b})"
                ));
            } else if b >= max {
                errs.push(format!(
                    "thinking_budget_tokens: must be below max_tokens ({max}); raise max_tokens \
                     or lower the budget"
                ));
            }
        }
    }

    /// The settings that change a model's answer beyond the request itself, for the
    /// record/replay key: only those set, so recordings made before they existed still match.
    pub fn answer_settings(&self) -> Value {
        let mut m = Map::new();
        if self.uses_responses_api() {
            m.insert("api".into(), json!("responses"));
        }
        if let Some(p) = self.top_p {
            m.insert("top_p".into(), json!(p));
        }
        if let Some(e) = &self.reasoning_effort {
            m.insert("reasoning_effort".into(), json!(e));
        }
        if let Some(s) = &self.reasoning_summary {
            m.insert("reasoning_summary".into(), json!(s));
        }
        if !self.extra_body.is_empty() {
            m.insert("extra_body".into(), Value::Object(self.extra_body.clone()));
        }
        if let Some(b) = self.thinking_budget_tokens {
            m.insert("thinking_budget_tokens".into(), json!(b));
        }
        Value::Object(m)
    }
}

/// Providers whose frontier fields are checked against each other.
const PROVIDERS_WITH_APIS: &[&str] = &["openai", "anthropic"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_families() {
        for m in [
            "o1",
            "o3-mini",
            "o4-mini",
            "gpt-5",
            "gpt-5.4",
            "gpt-5-mini",
            "openai/gpt-5",
        ] {
            assert!(is_reasoning_model(m), "{m}");
        }
        for m in ["gpt-4o", "gpt-4.1-mini", "ollama", "qwen3", "omni"] {
            assert!(!is_reasoning_model(m), "{m}");
        }
        let mut c = ModelConfig::from_spec("openai:gpt-5").unwrap();
        assert_eq!(max_tokens_field(&c), "max_completion_tokens");
        c.max_tokens_field = Some("max_tokens".into());
        assert_eq!(max_tokens_field(&c), "max_tokens");
        let c = ModelConfig::from_spec("openai:gpt-4o").unwrap();
        assert_eq!(max_tokens_field(&c), "max_tokens");
    }

    #[test]
    fn validation_names_each_field() {
        let mut c = ModelConfig::from_spec("openai:gpt-5").unwrap();
        c.temperature = Some(0.7);
        c.reasoning_effort = Some("extreme".into());
        c.max_tokens_field = Some("max_output".into());
        c.api = Some("assistants".into());
        c.extra_body.insert("messages".into(), json!([]));
        c.thinking_budget_tokens = Some(2048);
        let e = c.validate().unwrap_err().to_string();
        for want in [
            "temperature: reasoning model `gpt-5`",
            "reasoning_effort: `extreme` is not one of none, minimal",
            "max_tokens_field: `max_output`",
            "api: `assistants` is not one of chat, responses",
            "extra_body.messages",
            "thinking_budget_tokens: applies to provider `anthropic` only",
        ] {
            assert!(e.contains(want), "{want}: {e}");
        }
        let mut a = ModelConfig::from_spec("anthropic:claude-sonnet-4-5").unwrap();
        a.thinking_budget_tokens = Some(512);
        a.reasoning_effort = Some("high".into());
        let e = a.validate().unwrap_err().to_string();
        assert!(e.contains("thinking_budget_tokens: must be >= 1024"), "{e}");
        assert!(
            e.contains("reasoning_effort: applies to provider `openai`"),
            "{e}"
        );
        a.reasoning_effort = None;
        a.thinking_budget_tokens = Some(8192);
        let e = a.validate().unwrap_err().to_string();
        assert!(e.contains("below max_tokens (8192)"), "{e}");
        a.max_tokens = Some(16000);
        a.validate().unwrap();
    }

    #[test]
    fn answer_settings_only_when_set() {
        let c = ModelConfig::from_spec("openai:gpt-5").unwrap();
        assert_eq!(c.answer_settings(), json!({}));
        let mut c = c;
        c.reasoning_effort = Some("high".into());
        c.extra_body
            .insert("reasoning".into(), json!({"effort": "low"}));
        assert_eq!(
            c.answer_settings(),
            json!({"reasoning_effort": "high", "extra_body": {"reasoning": {"effort": "low"}}})
        );
    }
}
