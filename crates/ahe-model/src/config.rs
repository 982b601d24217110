//! Model configuration: which provider and model, prices, retries, limits.

pub mod frontier;

use std::path::PathBuf;

use anyhow::{anyhow, bail};
use serde::{Deserialize, Serialize};

/// The providers `provider` may name.
pub const PROVIDERS: &[&str] = &["openai", "anthropic", "local", "mock"];

/// The mock models `model` may name when `provider = "mock"`.
pub const MOCK_MODELS: &[&str] = &["oracle", "nop", "script"];

/// The accepted forms of a CLI model spec (for error messages and `--help`).
pub const SPEC_FORMS: &str = "mock:oracle, mock:nop, mock:script=FILE, openai:MODEL, \
                              anthropic:MODEL, local, local:PATH";

/// Configuration of one model client (a `[model]` table in run configs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Backend: "openai" | "anthropic" | "local" | "mock".
    #[serde(default = "default_provider")]
    pub provider: String,
    /// Model name; for the mock: "oracle" | "nop" | "script".
    #[serde(default = "default_model")]
    pub model: String,
    /// API base URL (OpenAI-compatible: up to and including `/v1`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Name of the env var holding the API key (the key itself never appears in configs).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Sampling temperature applied when a request sets none.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Output token cap applied when a request sets none.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Nucleus sampling `top_p`, sent only when set (reasoning models accept only the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// openai: which API to speak, `chat` (chat completions, default) or `responses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// openai chat: the name of the output cap field, `auto` (default: `max_completion_tokens`
    /// for reasoning models, o1/o3/o4/gpt-5*, else `max_tokens`), `max_tokens` or
    /// `max_completion_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<String>,
    /// openai: reasoning effort (`none`, `minimal`, `low`, `medium`, `high`, `xhigh`), passed
    /// as given (`reasoning_effort` in chat, `reasoning.effort` in responses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// openai responses: reasoning summary (`auto`, `concise`, `detailed`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_summary: Option<String>,
    /// openai: fields merged into every request body (vLLM, OpenRouter, Ollama options).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// anthropic: prompt caching with `cache_control` breakpoints (default on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<bool>,
    /// anthropic: cache lifetime, `5m` (default) or `1h` (writes priced 2x input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_ttl: Option<String>,
    /// anthropic: extended thinking budget in tokens (>= 1024, below max_tokens); off when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget_tokens: Option<u32>,
    /// USD per million (uncached) input tokens.
    #[serde(default)]
    pub price_input_per_mtok: f64,
    /// USD per million cached input tokens read (default: 0.1x input for anthropic, else
    /// the input price).
    #[serde(default)]
    pub price_cached_input_per_mtok: Option<f64>,
    /// USD per million input tokens written to the prompt cache (default 1.25x input; 2x
    /// with `prompt_cache_ttl = "1h"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_cache_write_per_mtok: Option<f64>,
    /// USD per million output tokens.
    #[serde(default)]
    pub price_output_per_mtok: f64,
    /// Maximum number of requests in flight at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Retries of transient errors (429, 5xx, timeouts) per call.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Retries of malformed responses per call.
    #[serde(default = "default_max_malformed_retries")]
    pub max_malformed_retries: u32,
    /// Per-attempt timeout in seconds (a timeout is a transient error).
    #[serde(default = "default_timeout_sec")]
    pub timeout_sec: f64,
    /// Base of the exponential backoff, in milliseconds.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// Cap of the backoff (and of honoured Retry-After values), in milliseconds.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Mock script file (for `mock:script`).
    #[serde(default)]
    pub script: Option<PathBuf>,
    /// Local model: a GGUF file, or a directory holding one (default `~/.cache/ahe/models`).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Local model: context of one conversation in tokens (default: the model's, at most 8192).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u32>,
    /// Local model: CPU threads per decoding conversation (default: cores / local_concurrency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Local model: conversations decoded at once (default 1); other requests wait in its queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_concurrency: Option<usize>,
    /// Local model: conversations whose KV cache is kept per decoding slot (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_slots: Option<usize>,
    /// Sampling seed (local model, used when temperature > 0; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Record/replay cache of responses: `off`, `record` or `replay`.
    #[serde(default)]
    pub cache: CacheMode,
    /// Directory of the response cache (default: the run's `model-cache/`).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
}

/// What the record/replay cache does with each request (see [`crate::cache`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// No cache: every call goes to the provider.
    #[default]
    Off,
    /// Answer from the store when the request was seen, else call the provider and store.
    Record,
    /// Answer only from the store; a request never recorded is a permanent error.
    Replay,
}

impl CacheMode {
    /// The config spelling (`off`, `record`, `replay`).
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Off => "off",
            CacheMode::Record => "record",
            CacheMode::Replay => "replay",
        }
    }
}

/// Default provider ("mock").
pub fn default_provider() -> String {
    "mock".to_string()
}
/// Default model ("nop").
pub fn default_model() -> String {
    "nop".to_string()
}
/// Default concurrency (8).
pub fn default_concurrency() -> usize {
    8
}
/// Default transient retries (5).
pub fn default_max_retries() -> u32 {
    5
}
/// Default malformed-response retries (2).
pub fn default_max_malformed_retries() -> u32 {
    2
}
/// Default per-attempt timeout (600 s).
pub fn default_timeout_sec() -> f64 {
    600.0
}
/// Default backoff base (1000 ms).
pub fn default_backoff_base_ms() -> u64 {
    1000
}
/// Default backoff cap (60000 ms).
pub fn default_backoff_max_ms() -> u64 {
    60_000
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            provider: default_provider(),
            model: default_model(),
            base_url: None,
            api_key_env: None,
            temperature: None,
            max_tokens: None,
            top_p: None,
            api: None,
            max_tokens_field: None,
            reasoning_effort: None,
            reasoning_summary: None,
            extra_body: serde_json::Map::new(),
            prompt_cache: None,
            prompt_cache_ttl: None,
            thinking_budget_tokens: None,
            price_input_per_mtok: 0.0,
            price_cached_input_per_mtok: None,
            price_cache_write_per_mtok: None,
            price_output_per_mtok: 0.0,
            concurrency: default_concurrency(),
            max_retries: default_max_retries(),
            max_malformed_retries: default_max_malformed_retries(),
            timeout_sec: default_timeout_sec(),
            backoff_base_ms: default_backoff_base_ms(),
            backoff_max_ms: default_backoff_max_ms(),
            script: None,
            path: None,
            context_tokens: None,
            threads: None,
            local_concurrency: None,
            kv_slots: None,
            seed: None,
            cache: CacheMode::Off,
            cache_dir: None,
        }
    }
}

impl ModelConfig {
    /// Parses a CLI model spec (see [`SPEC_FORMS`]) into a config with default knobs.
    pub fn from_spec(spec: &str) -> anyhow::Result<ModelConfig> {
        let spec = spec.trim();
        let bad = || anyhow!("invalid model spec `{spec}`: expected one of {SPEC_FORMS}");
        let (provider, rest) = match spec.split_once(':') {
            Some((p, r)) => (p, Some(r)),
            None => (spec, None),
        };
        let mut cfg = ModelConfig {
            provider: provider.to_string(),
            ..ModelConfig::default()
        };
        match (provider, rest) {
            ("mock", Some("oracle")) | ("mock", Some("nop")) => {
                cfg.model = rest.unwrap_or_default().to_string();
            }
            ("mock", Some(r)) => {
                let file = r.strip_prefix("script=").filter(|f| !f.is_empty());
                let file = file.ok_or_else(bad)?;
                cfg.model = "script".to_string();
                cfg.script = Some(PathBuf::from(file));
            }
            ("openai", Some(m)) | ("anthropic", Some(m)) if !m.is_empty() => {
                cfg.model = m.to_string();
            }
            ("local", None) => cfg.model = "local".to_string(),
            ("local", Some(p)) if !p.is_empty() => {
                cfg.model = "local".to_string();
                cfg.path = Some(PathBuf::from(p));
            }
            _ => return Err(bad()),
        }
        Ok(cfg)
    }

    /// Short description, e.g. `openai:gpt-4o` or `mock:script=s.toml` (a valid spec).
    pub fn describe(&self) -> String {
        match self.provider.as_str() {
            "mock" if self.model == "script" => match &self.script {
                Some(p) => format!("mock:script={}", p.display()),
                None => "mock:script".to_string(),
            },
            "local" => match &self.path {
                Some(p) => format!("local:{}", p.display()),
                None => "local".to_string(),
            },
            _ => format!("{}:{}", self.provider, self.model),
        }
    }

    /// Checks every field; the error lists each bad field with the expected form.
    pub fn validate(&self) -> anyhow::Result<()> {
        let mut errs: Vec<String> = Vec::new();
        self.check_provider_and_model(&mut errs);
        self.check_request_fields(&mut errs);
        self.validate_frontier(&mut errs);
        self.check_prices(&mut errs);
        self.check_limits(&mut errs);
        if errs.is_empty() {
            Ok(())
        } else {
            bail!("invalid model config: {}", errs.join("; "))
        }
    }

    /// Checks that the provider is known and the model names one it has (a mock model, a
    /// script for `mock:script`, a non-empty name for the API providers).
    fn check_provider_and_model(&self, errs: &mut Vec<String>) {
        if !PROVIDERS.contains(&self.provider.as_str()) {
            errs.push(format!(
                "provider: `{}` is not one of {}",
                self.provider,
                PROVIDERS.join(", ")
            ));
        }
        match self.provider.as_str() {
            "mock" => {
                if !MOCK_MODELS.contains(&self.model.as_str()) {
                    errs.push(format!(
                        "model: mock model `{}` is not one of {}",
                        self.model,
                        MOCK_MODELS.join(", ")
                    ));
                }
                if self.model == "script" && self.script.is_none() {
                    errs.push(
                        "script: mock model `script` needs `script = \"FILE.toml\"` \
                         (spec form mock:script=FILE)"
                            .to_string(),
                    );
                }
            }
            "openai" | "anthropic" if self.model.trim().is_empty() => {
                errs.push(format!(
                    "model: must name the model for provider `{}` (e.g. {}:MODEL)",
                    self.provider, self.provider
                ));
            }
            _ => {}
        }
    }

    /// Checks the key variable's name, the base URL's scheme, the temperature and
    /// `max_tokens`.
    fn check_request_fields(&self, errs: &mut Vec<String>) {
        if matches!(&self.api_key_env, Some(v) if v.trim().is_empty()) {
            errs.push("api_key_env: must be an env var name, e.g. OPENAI_API_KEY".to_string());
        }
        if matches!(&self.base_url, Some(u) if !(u.starts_with("http://") || u.starts_with("https://")))
        {
            errs.push("base_url: must start with http:// or https://".to_string());
        }
        if matches!(self.temperature, Some(t) if !(t.is_finite() && t >= 0.0)) {
            errs.push("temperature: must be a number >= 0".to_string());
        }
        if self.max_tokens == Some(0) {
            errs.push("max_tokens: must be >= 1 when set".to_string());
        }
    }

    /// Checks that every price set is a finite number >= 0.
    fn check_prices(&self, errs: &mut Vec<String>) {
        let prices = [
            ("price_input_per_mtok", Some(self.price_input_per_mtok)),
            (
                "price_cached_input_per_mtok",
                self.price_cached_input_per_mtok,
            ),
            (
                "price_cache_write_per_mtok",
                self.price_cache_write_per_mtok,
            ),
            ("price_output_per_mtok", Some(self.price_output_per_mtok)),
        ];
        for (name, p) in prices {
            if matches!(p, Some(p) if !(p.is_finite() && p >= 0.0)) {
                errs.push(format!(
                    "{name}: must be a finite number >= 0 (USD per 1M tokens)"
                ));
            }
        }
    }

    /// Checks the thread, slot, context and concurrency counts, the timeout and the backoff.
    fn check_limits(&self, errs: &mut Vec<String>) {
        for (name, v) in [
            ("threads", self.threads),
            ("local_concurrency", self.local_concurrency),
            ("kv_slots", self.kv_slots),
        ] {
            if v == Some(0) {
                errs.push(format!("{name}: must be >= 1 when set"));
            }
        }
        if matches!(self.context_tokens, Some(n) if n < 256) {
            errs.push("context_tokens: must be >= 256 when set".to_string());
        }
        if self.concurrency == 0 {
            errs.push("concurrency: must be >= 1".to_string());
        }
        if !(self.timeout_sec.is_finite() && self.timeout_sec > 0.0) {
            errs.push("timeout_sec: must be a number of seconds > 0".to_string());
        }
        if self.backoff_base_ms > self.backoff_max_ms {
            errs.push("backoff_base_ms: must be <= backoff_max_ms".to_string());
        }
    }

    /// Whether the model runs on this machine (the embedded `local` model): it costs no API
    /// money, whatever the prices say. The `mock` stands in for an API model and is priced
    /// like one.
    pub fn runs_locally(&self) -> bool {
        self.provider == "local"
    }

    /// Whether every price is 0 (cost unknown: shown as such, never as "$0").
    pub fn prices_unknown(&self) -> bool {
        self.price_input_per_mtok == 0.0
            && self.price_output_per_mtok == 0.0
            && self.price_cached_input_per_mtok.unwrap_or(0.0) == 0.0
            && self.price_cache_write_per_mtok.unwrap_or(0.0) == 0.0
    }

    /// Whether the openai provider speaks the Responses API (`api = "responses"`).
    pub fn uses_responses_api(&self) -> bool {
        self.api.as_deref() == Some("responses")
    }

    /// Whether anthropic prompt caching is on (default: yes).
    pub fn prompt_cache_on(&self) -> bool {
        self.prompt_cache.unwrap_or(true)
    }

    /// The env var holding the API key (`api_key_env`, else the provider's default).
    pub fn key_env(&self) -> String {
        match &self.api_key_env {
            Some(v) => v.clone(),
            None if self.provider == "anthropic" => "ANTHROPIC_API_KEY".to_string(),
            None => "OPENAI_API_KEY".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_roundtrip() {
        for spec in [
            "mock:oracle",
            "mock:nop",
            "mock:script=tests/s.toml",
            "openai:gpt-4o",
            "anthropic:claude-x",
            "local",
            "local:/models/m.gguf",
        ] {
            let cfg = ModelConfig::from_spec(spec).unwrap();
            assert_eq!(cfg.describe(), spec);
            cfg.validate().unwrap();
        }
        let s = ModelConfig::from_spec("mock:script=a.toml").unwrap();
        assert_eq!(s.model, "script");
        assert_eq!(s.script, Some(PathBuf::from("a.toml")));
        let o = ModelConfig::from_spec("openai:gpt-4o-mini").unwrap();
        assert_eq!(
            (o.provider.as_str(), o.model.as_str()),
            ("openai", "gpt-4o-mini")
        );
    }

    #[test]
    fn bad_specs_list_accepted_forms() {
        for spec in [
            "gpt-4o",
            "openai:",
            "mock:foo",
            "mock:script=",
            "local:",
            "",
        ] {
            let e = ModelConfig::from_spec(spec).unwrap_err().to_string();
            assert!(e.contains("mock:script=FILE"), "{spec}: {e}");
            assert!(e.contains("openai:MODEL"), "{spec}: {e}");
        }
    }

    #[test]
    fn defaults_from_empty_toml() {
        let cfg: ModelConfig = toml::from_str("provider = \"openai\"\nmodel = \"m\"").unwrap();
        assert_eq!(cfg.concurrency, 8);
        assert_eq!(cfg.max_retries, 5);
        assert_eq!(cfg.max_malformed_retries, 2);
        assert_eq!(cfg.timeout_sec, 600.0);
        assert_eq!(cfg.backoff_base_ms, 1000);
        assert_eq!(cfg.backoff_max_ms, 60_000);
        assert_eq!((cfg.cache, cfg.cache_dir.as_ref()), (CacheMode::Off, None));
        assert_eq!(ModelConfig::default().concurrency, 8);
        let back: ModelConfig = toml::from_str(&toml::to_string(&cfg).unwrap()).unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn cache_mode_parses_and_is_written() {
        let cfg: ModelConfig = toml::from_str(
            "provider = \"openai\"\nmodel = \"m\"\ncache = \"replay\"\ncache_dir = \"c\"",
        )
        .unwrap();
        assert_eq!(cfg.cache, CacheMode::Replay);
        assert_eq!(cfg.cache.as_str(), "replay");
        assert_eq!(cfg.cache_dir, Some(PathBuf::from("c")));
        let text = toml::to_string(&ModelConfig::default()).unwrap();
        assert!(text.contains("cache = \"off\""), "{text}");
        let e = toml::from_str::<ModelConfig>("cache = \"on\"").unwrap_err();
        assert!(e.to_string().contains("record"), "{e}");
    }

    #[test]
    fn unknown_fields_rejected() {
        let e = toml::from_str::<ModelConfig>("provider = \"openai\"\nmodle = \"x\"").unwrap_err();
        assert!(e.to_string().contains("modle"), "{e}");
    }

    #[test]
    fn validate_names_fields() {
        let mut c = ModelConfig {
            provider: "opneai".into(),
            ..ModelConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("provider") && e.contains("openai, anthropic, local, mock"),
            "{e}"
        );
        c.provider = "mock".into();
        c.model = "oracel".into();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("model") && e.contains("oracle, nop, script"),
            "{e}"
        );
        c.model = "script".into();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("script:") && e.contains("mock:script=FILE"),
            "{e}"
        );
        c.model = "nop".into();
        c.concurrency = 0;
        c.timeout_sec = 0.0;
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("concurrency") && e.contains("timeout_sec"),
            "{e}"
        );
        let o = ModelConfig {
            provider: "openai".into(),
            model: "".into(),
            ..ModelConfig::default()
        };
        assert!(o
            .validate()
            .unwrap_err()
            .to_string()
            .contains("openai:MODEL"));
    }

    #[test]
    fn key_env_defaults() {
        let mut c = ModelConfig::from_spec("openai:m").unwrap();
        assert_eq!(c.key_env(), "OPENAI_API_KEY");
        c.api_key_env = Some("MY_KEY".into());
        assert_eq!(c.key_env(), "MY_KEY");
        assert_eq!(
            ModelConfig::from_spec("anthropic:m").unwrap().key_env(),
            "ANTHROPIC_API_KEY"
        );
    }
}
