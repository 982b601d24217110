//! The `local` model provider: chat requests rendered for the shared [`Engine`], its
//! replies parsed back into answers and tool calls.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::engine::{Engine, GenRequest, DEFAULT_MAX_TOKENS};
use super::{interpret, render_conversation, LocalSettings};
use crate::config::ModelConfig;
use crate::types::{ChatRequest, ChatResponse, ModelError, Provider, Usage};

/// The `local` provider: renders requests for the shared [`Engine`] and reads its replies.
pub struct LocalProvider {
    engine: Arc<Engine>,
    desc: String,
    seed: u32,
    /// How often each conversation was asked so far (by its hash), so that repeats of an
    /// identical request (the k trials of a task) are sampled with different seeds. Only
    /// sampled requests (temperature > 0) are counted: greedy decoding uses no seed.
    asked: Mutex<HashMap<[u8; 32], u32>>,
}

impl LocalProvider {
    /// Loads (or reuses) the model a `provider = "local"` config names.
    pub fn new(cfg: &ModelConfig) -> anyhow::Result<LocalProvider> {
        let settings = LocalSettings::from_config(cfg)?;
        Ok(LocalProvider {
            engine: Engine::shared(&settings)?,
            desc: cfg.describe(),
            seed: cfg.seed.unwrap_or(0) as u32,
            asked: Mutex::new(HashMap::new()),
        })
    }

    /// The engine serving this provider.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The generation request for a chat request.
    ///
    /// With temperature > 0 the n-th identical request gets seed
    /// [`super::sample_seed`]`(seed, its hash, n)`: the k trials of a task are k different
    /// samples, and a rerun of the same requests in the same order samples the same replies.
    pub fn gen_request(&self, req: &ChatRequest) -> GenRequest {
        let turns = render_conversation(req);
        let grammar = super::reply_grammar(req);
        let temperature = req.temperature.unwrap_or(0.0);
        let seed = if temperature > 0.0 {
            let hash = super::conversation_hash(&turns, grammar.as_deref());
            let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
            let n = asked.entry(hash).or_insert(0);
            *n += 1;
            super::sample_seed(self.seed, &hash, *n - 1)
        } else {
            self.seed
        };
        GenRequest {
            seed,
            turns,
            grammar,
            temperature,
            max_tokens: req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            reuse_prefix: true,
        }
    }
}

#[async_trait::async_trait]
impl Provider for LocalProvider {
    fn describe(&self) -> String {
        self.desc.clone()
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let out = self.engine.generate(self.gen_request(req)).await?;
        let usage = Usage {
            input_tokens: out.prompt_tokens as u64,
            cached_input_tokens: out.cached_tokens as u64,
            output_tokens: out.output_tokens as u64,
            ..Default::default()
        };
        Ok(interpret(req, &out.text, out.cut_off, usage))
    }
}
