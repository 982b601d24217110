//! Model access for ahe: provider-neutral chat types, an OpenAI-compatible HTTP
//! provider, a deterministic mock, and a client adding concurrency limits, retries,
//! timeouts, cost and per-role accounting.

#![warn(missing_docs)]

pub mod client;
pub mod config;
pub mod mock;
pub mod openai;
#[cfg(feature = "test-server")]
pub mod testserver;
pub mod types;

use std::sync::Arc;

pub use client::{ModelClient, ModelStats, Prices, RoleUsage};
pub use config::ModelConfig;
pub use mock::{MockMode, MockProvider, MockScript};
pub use openai::OpenAiProvider;
pub use types::*;

/// Validates `cfg`, builds its provider and wraps it in a [`ModelClient`].
pub fn build_client(cfg: &ModelConfig) -> anyhow::Result<ModelClient> {
    cfg.validate()?;
    let provider: Arc<dyn Provider> = match cfg.provider.as_str() {
        "openai" => Arc::new(OpenAiProvider::new(cfg)?),
        "mock" => Arc::new(MockProvider::from_config(cfg)?),
        other @ ("anthropic" | "local") => {
            anyhow::bail!("provider `{other}` is not available in this build yet")
        }
        other => anyhow::bail!("provider: `{other}` is not one of openai, anthropic, local, mock"),
    };
    Ok(ModelClient::new(provider, cfg))
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
        for spec in ["anthropic:m", "local"] {
            let e = build_client(&ModelConfig::from_spec(spec).unwrap()).unwrap_err();
            assert!(
                e.to_string().contains("not available in this build yet"),
                "{e}"
            );
        }
        let bad = ModelConfig {
            model: "oracel".into(),
            ..ModelConfig::default()
        };
        assert!(build_client(&bad)
            .unwrap_err()
            .to_string()
            .contains("model"));
    }
}
