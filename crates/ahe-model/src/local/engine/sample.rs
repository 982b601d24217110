//! Sampling a reply token by token after the prompt: the action grammar, the repetition
//! penalty and the fast path that checks the best tokens before the whole vocabulary.

use std::time::Instant;

use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;

use super::{GenRequest, Reply, Worker, TOP_K};
use crate::local::repeat;
use crate::types::ModelError;

/// What sampling one reply produced.
pub(super) struct Sampled {
    /// The reply's text (invalid UTF-8 replaced).
    pub(super) text: String,
    /// Tokens generated.
    pub(super) tokens: u32,
    /// Whether `max_tokens` or the context stopped it before the end of generation.
    pub(super) cut_off: bool,
    /// Time spent sampling, in milliseconds.
    pub(super) decode_ms: f64,
}

impl Worker {
    /// Samples the reply into the slot after the prompt (whose last batch `batch` holds)
    /// until the end of generation, `max_tokens` or a full context, giving up when the
    /// caller has gone.
    pub(super) fn sample_reply(
        &mut self,
        req: &GenRequest,
        reply: &Reply,
        slot: usize,
        batch: &mut LlamaBatch<'_>,
    ) -> Result<Sampled, ModelError> {
        let ctx = self.ctx_tokens as usize;
        let seq = slot as i32;
        let mut grammar = match &req.grammar {
            Some(g) => Some(LlamaSampler::grammar(self.model, g, "root").map_err(|e| {
                ModelError::Permanent(format!("the action grammar does not compile: {e}"))
            })?),
            None => None,
        };
        let mut dist = (req.temperature > 0.0).then(|| {
            LlamaSampler::chain_simple([
                LlamaSampler::temp(req.temperature),
                LlamaSampler::dist(req.seed),
            ])
        });
        let t1 = Instant::now();
        let model = self.model;
        let vocab = model.vocab();
        let mut bytes: Vec<u8> = Vec::new();
        let mut out_tokens = 0u32;
        let mut said: Vec<i32> = Vec::new();
        let mut idx = batch.n_tokens() - 1;
        let mut cut_off = false;
        loop {
            if out_tokens >= req.max_tokens || self.slots[slot].tokens.len() >= ctx {
                cut_off = true;
                break;
            }
            if out_tokens % 32 == 31 && reply.is_closed() {
                return self.fail(slot, "request cancelled".into());
            }
            let tok = self.pick(idx, grammar.as_mut(), dist.as_mut(), &said)?;
            if vocab.is_eog(tok) {
                break;
            }
            bytes.extend(vocab.token_to_piece(tok, false, None));
            out_tokens += 1;
            said.push(tok.0);
            let pos = self.slots[slot].tokens.len();
            batch.clear();
            batch
                .add(tok, pos as i32, &[seq], true)
                .map_err(|e| ModelError::Permanent(format!("batch: {e}")))?;
            if let Err(e) = self.ctx.decode(batch) {
                return self.decode_failed(slot, e);
            }
            self.slots[slot].tokens.push(tok);
            idx = 0;
        }
        Ok(Sampled {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            tokens: out_tokens,
            cut_off,
            decode_ms: t1.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// The next token: greedy (or sampled) among those the grammar admits, after the
    /// repetition penalty. Greedy steps check the single best token first, then the best
    /// [`TOP_K`], and apply the grammar to the whole vocabulary only when those all fail.
    fn pick(
        &self,
        idx: i32,
        grammar: Option<&mut LlamaSampler>,
        dist: Option<&mut LlamaSampler>,
        said: &[i32],
    ) -> Result<LlamaToken, ModelError> {
        let mut logits = self.ctx.get_logits_ith(idx).to_vec();
        for (t, p) in repeat::penalties(said) {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= p;
            }
        }
        let none = || ModelError::Malformed("the grammar admits no token".into());
        let tok = match (grammar, dist) {
            (None, None) => best(&top(&logits, 1)).ok_or_else(none)?,
            (Some(g), None) => {
                let mut found = None;
                for k in [1, TOP_K, logits.len()] {
                    let mut arr = LlamaTokenDataArray::new(top(&logits, k), false);
                    arr.apply_sampler(g);
                    found = best(&arr.data);
                    if found.is_some() {
                        break;
                    }
                }
                let t = found.ok_or_else(none)?;
                if !self.model.vocab().is_eog(t) {
                    g.accept(t);
                }
                t
            }
            (mut g, Some(d)) => {
                let mut arr = LlamaTokenDataArray::new(top(&logits, logits.len()), false);
                if let Some(g) = g.as_deref_mut() {
                    arr.apply_sampler(g);
                }
                arr.apply_sampler(d);
                let t = arr.selected_token().ok_or_else(none)?;
                if let Some(g) = g {
                    if !self.model.vocab().is_eog(t) {
                        g.accept(t);
                    }
                }
                t
            }
        };
        Ok(tok)
    }
}

/// The `k` candidates with the highest logits (all of them when `k` covers the vocabulary).
fn top(logits: &[f32], k: usize) -> Vec<LlamaTokenData> {
    let data = |(i, l): (usize, f32)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0);
    if k >= logits.len() {
        return logits.iter().copied().enumerate().map(data).collect();
    }
    if k == 1 {
        let m = logits
            .iter()
            .copied()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |b, c| if c.1 > b.1 { c } else { b });
        return vec![data(m)];
    }
    let mut v: Vec<(usize, f32)> = logits.iter().copied().enumerate().collect();
    v.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
    v.truncate(k);
    v.into_iter().map(data).collect()
}

/// The candidate with the highest finite logit (the grammar sets the rest to -inf).
fn best(c: &[LlamaTokenData]) -> Option<LlamaToken> {
    c.iter()
        .filter(|d| d.logit().is_finite())
        .max_by(|a, b| a.logit().total_cmp(&b.logit()))
        .map(LlamaTokenData::id)
}
