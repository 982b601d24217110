//! Model access for ahe: provider-neutral chat types, OpenAI-compatible and Anthropic
//! HTTP providers, an in-process GGUF model (`local`), a deterministic mock, a
//! record/replay cache, and a client adding
//! concurrency limits, retries, timeouts, cost, per-role accounting and a shared budget.

#![warn(missing_docs)]

pub mod anthropic;
pub mod budget;
pub mod cache;
pub mod client;
pub mod config;
mod http;
pub mod local;
pub mod mock;
pub mod openai;
pub mod prices;
pub mod responses;
pub mod types;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;

pub use anthropic::AnthropicProvider;
pub use budget::Budget;
pub use cache::CachedProvider;
pub use client::{ModelClient, ModelStats, Prices, RoleUsage};
pub use config::{CacheMode, ModelConfig};
pub use mock::{MockMode, MockProvider, MockScript};
pub use openai::OpenAiProvider;
pub use types::*;

/// What a run adds to a model config when it builds a client.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Cache directory when the config sets `cache` but no `cache_dir` (a run's `model-cache/`).
    pub default_cache_dir: Option<PathBuf>,
    /// The run's budget, shared by all its clients and checked before each call.
    pub budget: Option<Arc<Budget>>,
}

/// Validates `cfg`, builds its provider and wraps it in a [`ModelClient`].
pub fn build_client(cfg: &ModelConfig) -> anyhow::Result<ModelClient> {
    build_client_with(cfg, &ClientOptions::default())
}

/// [`build_client`] with a run's default cache directory and shared budget.
pub fn build_client_with(cfg: &ModelConfig, opts: &ClientOptions) -> anyhow::Result<ModelClient> {
    cfg.validate()?;
    let mut provider: Arc<dyn Provider> = match cfg.provider.as_str() {
        "openai" => Arc::new(OpenAiProvider::new(cfg)?),
        "anthropic" => Arc::new(AnthropicProvider::new(cfg)?),
        "mock" => Arc::new(MockProvider::from_config(cfg)?),
        #[cfg(feature = "local-model")]
        "local" => Arc::new(local::LocalProvider::new(cfg)?),
        #[cfg(not(feature = "local-model"))]
        "local" => anyhow::bail!(
            "provider `local` is not in this build (cargo feature `local-model` of ahe-model is off)"
        ),
        other => anyhow::bail!("provider: `{other}` is not one of openai, anthropic, local, mock"),
    };
    if cfg.cache != CacheMode::Off {
        let dir = cfg
            .cache_dir
            .clone()
            .or_else(|| opts.default_cache_dir.clone())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "cache = \"{}\" needs cache_dir (no run directory provides a default here)",
                    cfg.cache.as_str()
                )
            })?;
        if cfg.cache == CacheMode::Replay && !dir.is_dir() {
            anyhow::bail!(
                "cache = \"replay\": the cache directory {} does not exist (record first with cache = \"record\")",
                dir.display()
            );
        }
        provider = Arc::new(
            CachedProvider::new(provider, cfg.cache, dir, &cfg.provider, &cfg.model)
                .with_settings(cfg.answer_settings()),
        );
    }
    Ok(ModelClient::with_budget(provider, cfg, opts.budget.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_client_by_provider() {
        let c = build_client(&ModelConfig::from_spec("mock:oracle").unwrap()).unwrap();
        assert_eq!(c.describe(), "mock:oracle");
        let c = build_client(&ModelConfig::from_spec("openai:gpt-4o").unwrap()).unwrap();
        assert_eq!(c.describe(), "openai:gpt-4o");
        let c = build_client(&ModelConfig::from_spec("anthropic:claude-x").unwrap()).unwrap();
        assert_eq!(c.describe(), "anthropic:claude-x");
        let d = tempfile::tempdir().unwrap();
        let spec = format!("local:{}", d.path().display());
        let e = build_client(&ModelConfig::from_spec(&spec).unwrap()).unwrap_err();
        assert!(
            e.to_string().contains("fetch-model.sh") || e.to_string().contains("local-model"),
            "{e}"
        );
        let bad = ModelConfig {
            model: "oracel".into(),
            ..ModelConfig::default()
        };
        assert!(build_client(&bad)
            .unwrap_err()
            .to_string()
            .contains("model"));
    }

    #[test]
    fn cache_needs_a_directory_and_replay_an_existing_one() {
        let mut cfg = ModelConfig::from_spec("mock:oracle").unwrap();
        cfg.cache = CacheMode::Record;
        let e = build_client(&cfg).unwrap_err().to_string();
        assert!(e.contains("cache_dir"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let opts = ClientOptions {
            default_cache_dir: Some(d.path().join("model-cache")),
            budget: Some(Arc::new(Budget::new(1.0))),
        };
        let c = build_client_with(&cfg, &opts).unwrap();
        assert_eq!(c.describe(), "mock:oracle");
        assert!(c.budget().is_some());
        cfg.cache = CacheMode::Replay;
        let e = build_client_with(&cfg, &opts).unwrap_err().to_string();
        assert!(
            e.contains("does not exist") && e.contains("model-cache"),
            "{e}"
        );
        cfg.cache_dir = Some(d.path().to_path_buf());
        build_client_with(&cfg, &opts).unwrap();
    }
}
