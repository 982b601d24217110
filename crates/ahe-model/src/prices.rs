//! Per-million-token prices and the cost of one call's usage (uncached input, cache reads,
//! cache writes and output priced apart).

use crate::config::ModelConfig;
use crate::types::Usage;

/// Per-million-token prices.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    /// USD per 1M uncached input tokens.
    pub input: f64,
    /// USD per 1M input tokens read from the prompt cache.
    pub cached_input: f64,
    /// USD per 1M input tokens written to the prompt cache.
    pub cache_write: f64,
    /// USD per 1M output tokens.
    pub output: f64,
}

/// Anthropic's list price of a cache read, as a fraction of the input price.
pub const CACHE_READ_FACTOR: f64 = 0.1;
/// Anthropic's list price of a 5-minute cache write, as a multiple of the input price.
pub const CACHE_WRITE_FACTOR: f64 = 1.25;
/// Anthropic's list price of a 1-hour cache write, as a multiple of the input price.
pub const CACHE_WRITE_1H_FACTOR: f64 = 2.0;

impl Prices {
    /// Prices from a config: cached reads at 0.1x input for anthropic (else the input
    /// price), cache writes at 1.25x input (2x with a 1 h TTL), unless set.
    pub fn from_config(cfg: &ModelConfig) -> Prices {
        let input = cfg.price_input_per_mtok;
        let read = if cfg.provider == "anthropic" {
            CACHE_READ_FACTOR * input
        } else {
            input
        };
        let write = match cfg.prompt_cache_ttl.as_deref() {
            Some("1h") => CACHE_WRITE_1H_FACTOR * input,
            _ => CACHE_WRITE_FACTOR * input,
        };
        Prices {
            input,
            cached_input: cfg.price_cached_input_per_mtok.unwrap_or(read),
            cache_write: cfg.price_cache_write_per_mtok.unwrap_or(write),
            output: cfg.price_output_per_mtok,
        }
    }
    /// Whether every price is 0 (the config names none: cost unknown, not free).
    pub fn unknown(&self) -> bool {
        self.input == 0.0
            && self.cached_input == 0.0
            && self.cache_write == 0.0
            && self.output == 0.0
    }
    /// Cost in USD of one call's usage (reads, writes and the uncached rest priced apart).
    pub fn cost(&self, u: &Usage) -> f64 {
        let cached = u.cached_input_tokens.min(u.input_tokens);
        let written = u.cache_write_input_tokens.min(u.input_tokens - cached);
        let uncached = u.input_tokens - cached - written;
        (uncached as f64 * self.input
            + cached as f64 * self.cached_input
            + written as f64 * self.cache_write
            + u.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_uses_cached_price() {
        let p = Prices {
            input: 2.0,
            cached_input: 0.5,
            cache_write: 2.5,
            output: 10.0,
        };
        let u = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 400_000,
            output_tokens: 100_000,
            ..Default::default()
        };
        assert!((p.cost(&u) - (1.2 + 0.2 + 1.0)).abs() < 1e-9);
        let c = ModelConfig {
            price_input_per_mtok: 3.0,
            ..ModelConfig::default()
        };
        assert_eq!(Prices::from_config(&c).cached_input, 3.0);
        assert!(!Prices::from_config(&c).unknown());
        assert!(Prices::from_config(&ModelConfig::default()).unknown());
        // Anthropic list-price defaults: reads 0.1x, writes 1.25x (2x for a 1 h TTL).
        let mut a = ModelConfig {
            provider: "anthropic".into(),
            price_input_per_mtok: 3.0,
            ..ModelConfig::default()
        };
        let pa = Prices::from_config(&a);
        assert!((pa.cached_input - 0.3).abs() < 1e-12 && (pa.cache_write - 3.75).abs() < 1e-12);
        a.prompt_cache_ttl = Some("1h".into());
        assert_eq!(Prices::from_config(&a).cache_write, 6.0);
        // 1M prompt tokens: 600k read, 300k written, 100k uncached; no output.
        let u = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 600_000,
            cache_write_input_tokens: 300_000,
            ..Default::default()
        };
        let want = 0.1 * 3.0 + 0.6 * 0.3 + 0.3 * 3.75;
        assert!((pa.cost(&u) - want).abs() < 1e-9, "{}", pa.cost(&u));
    }
}
