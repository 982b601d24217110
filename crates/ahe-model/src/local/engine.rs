//! The llama.cpp engine behind the `local` provider.
//!
//! One [`Engine`] per (model file, settings) per process, shared by every client that asks
//! for it: `concurrency` worker threads each own a llama context whose KV cache holds
//! `kv_slots` conversations. Requests wait in one queue; a worker renders the conversation
//! with the model's chat template, finds the cached conversation sharing the longest token
//! prefix with it, drops the cache after that prefix and decodes only the new tokens.
//! Sampling is greedy at temperature 0 (seeded otherwise) under the action grammar and a
//! DRY-style repetition penalty (`repeat`), with the
//! usual fast path: the unconstrained best token is checked against the grammar first, and
//! the grammar is applied to the whole vocabulary only when it is rejected.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Instant;

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::DecodeError;
use tokio::sync::oneshot;

use super::LocalSettings;
use crate::types::ModelError;

mod sample;

/// Tokens decoded per llama_decode call while reading a prompt.
const N_BATCH: usize = 512;
/// Largest default context of one conversation.
const MAX_DEFAULT_CTX: u32 = 8192;
/// Candidates checked against the grammar before the whole vocabulary is.
const TOP_K: usize = 64;
/// Shortest shared prefix worth copying from another conversation's cache.
const MIN_SHARED: usize = 32;
/// Output cap when neither the request nor the config sets one.
pub(super) const DEFAULT_MAX_TOKENS: u32 = 512;

/// One generation request, already rendered to chat turns.
#[derive(Debug, Clone)]
pub struct GenRequest {
    /// (role, text) turns for the chat template.
    pub turns: Vec<(String, String)>,
    /// GBNF grammar the reply must match (root rule `root`), if any.
    pub grammar: Option<String>,
    /// Sampling temperature (0 = greedy).
    pub temperature: f32,
    /// Seed of the sampler when temperature > 0.
    pub seed: u32,
    /// Output token cap.
    pub max_tokens: u32,
    /// Reuse the KV cache of a shared prefix (off only to measure what reuse saves).
    pub reuse_prefix: bool,
}

/// What one generation produced, with its token counts and timings.
#[derive(Debug, Clone)]
pub struct GenOutput {
    /// The reply text.
    pub text: String,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Of the prompt tokens, how many came from the KV cache.
    pub cached_tokens: u32,
    /// Generated tokens (the end-of-turn token not counted).
    pub output_tokens: u32,
    /// Whether the reply was cut off by the token cap or the context.
    pub cut_off: bool,
    /// Time spent decoding the new prompt tokens, in ms.
    pub prefill_ms: f64,
    /// Time spent generating, in ms.
    pub decode_ms: f64,
}

type Reply = oneshot::Sender<Result<GenOutput, ModelError>>;

struct Job {
    req: GenRequest,
    reply: Reply,
}

/// A loaded model with its worker threads and request queue.
pub struct Engine {
    tx: Mutex<mpsc::Sender<Job>>,
    ctx_tokens: u32,
    path: PathBuf,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("path", &self.path).finish()
    }
}

fn backend() -> anyhow::Result<&'static LlamaBackend> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs to stderr by default; route it into tracing (target llama-cpp-2).
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("llama.cpp backend: {e}"))
}

/// The model of a file, loaded once per process and kept for its lifetime.
fn model(path: &PathBuf) -> anyhow::Result<&'static LlamaModel> {
    static MODELS: OnceLock<Mutex<HashMap<PathBuf, &'static LlamaModel>>> = OnceLock::new();
    let mut models = MODELS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(m) = models.get(path) {
        return Ok(m);
    }
    let m = LlamaModel::load_from_file(backend()?, path, &LlamaModelParams::default())
        .map_err(|e| anyhow::anyhow!("local model: cannot load {}: {e}", path.display()))?;
    let m: &'static LlamaModel = Box::leak(Box::new(m));
    models.insert(path.clone(), m);
    Ok(m)
}

impl Engine {
    /// The engine of these settings, started on first use and shared afterwards.
    pub fn shared(s: &LocalSettings) -> anyhow::Result<Arc<Engine>> {
        static ENGINES: OnceLock<Mutex<HashMap<LocalSettings, Arc<Engine>>>> = OnceLock::new();
        let mut engines = ENGINES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(e) = engines.get(s) {
            return Ok(e.clone());
        }
        let e = Arc::new(Engine::start(s)?);
        engines.insert(s.clone(), e.clone());
        Ok(e)
    }

    fn start(s: &LocalSettings) -> anyhow::Result<Engine> {
        let model = model(&s.path)?;
        let train = model.n_ctx_train().max(256);
        let ctx_tokens = match s.context_tokens {
            0 => train.min(MAX_DEFAULT_CTX),
            n => n,
        };
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = match s.threads {
            0 => (cores / s.concurrency).max(1),
            n => n,
        };
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..s.concurrency {
            let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
            let rx = rx.clone();
            let (slots, path) = (s.kv_slots, s.path.clone());
            std::thread::Builder::new()
                .name(format!("ahe-local-{i}"))
                .spawn(move || {
                    let mut w = match Worker::new(model, ctx_tokens, slots, threads) {
                        Ok(w) => {
                            let _ = ready_tx.send(Ok(()));
                            w
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(format!("{}: {e}", path.display())));
                            return;
                        }
                    };
                    w.serve(&rx);
                })?;
            ready_rx
                .recv()
                .map_err(|_| anyhow::anyhow!("local model worker died while starting"))?
                .map_err(|e| anyhow::anyhow!("local model: cannot create a context for {e}"))?;
        }
        tracing::info!(
            path = %s.path.display(),
            ctx_tokens,
            threads,
            concurrency = s.concurrency,
            kv_slots = s.kv_slots,
            "local model ready"
        );
        Ok(Engine {
            tx: Mutex::new(tx),
            ctx_tokens,
            path: s.path.clone(),
        })
    }

    /// Context of one conversation, in tokens.
    pub fn context_tokens(&self) -> u32 {
        self.ctx_tokens
    }

    fn submit(&self, req: GenRequest) -> oneshot::Receiver<Result<GenOutput, ModelError>> {
        let (reply, rx) = oneshot::channel();
        let sent = self
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Job { req, reply });
        if let Err(mpsc::SendError(job)) = sent {
            let _ = job.reply.send(Err(ModelError::Permanent(
                "local model workers have stopped".into(),
            )));
        }
        rx
    }

    /// Queues a request and waits for its reply (dropping the future cancels it).
    pub async fn generate(&self, req: GenRequest) -> Result<GenOutput, ModelError> {
        self.submit(req).await.unwrap_or_else(|_| {
            Err(ModelError::Transient {
                message: "local model worker dropped the request".into(),
                retry_after_sec: None,
            })
        })
    }

    /// [`Engine::generate`] for callers outside an async runtime (benchmarks).
    pub fn generate_blocking(&self, req: GenRequest) -> Result<GenOutput, ModelError> {
        self.submit(req).blocking_recv().unwrap_or_else(|_| {
            Err(ModelError::Transient {
                message: "local model worker dropped the request".into(),
                retry_after_sec: None,
            })
        })
    }
}

/// One cached conversation of a worker's KV cache (its sequence id is its index).
#[derive(Default)]
struct Slot {
    tokens: Vec<LlamaToken>,
    prompt_len: usize,
    last_used: u64,
}

struct Worker {
    model: &'static LlamaModel,
    ctx: LlamaContext<'static>,
    template: LlamaChatTemplate,
    slots: Vec<Slot>,
    ctx_tokens: u32,
    clock: u64,
}

impl Worker {
    fn new(
        model: &'static LlamaModel,
        ctx_tokens: u32,
        slots: usize,
        threads: usize,
    ) -> anyhow::Result<Worker> {
        let n_ctx = ctx_tokens.saturating_mul(slots as u32);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(N_BATCH as u32)
            .with_n_ubatch(N_BATCH as u32)
            .with_n_seq_max(slots as u32)
            .with_kv_unified(false)
            .with_n_threads(threads as i32)
            .with_n_threads_batch(threads as i32);
        let ctx = model.new_context(backend()?, params)?;
        let template = model
            .chat_template(None)
            .or_else(|_| LlamaChatTemplate::new("chatml"))
            .map_err(|e| anyhow::anyhow!("chat template: {e}"))?;
        Ok(Worker {
            model,
            ctx,
            template,
            slots: (0..slots).map(|_| Slot::default()).collect(),
            ctx_tokens,
            clock: 0,
        })
    }

    fn serve(&mut self, rx: &Mutex<mpsc::Receiver<Job>>) {
        loop {
            let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                Ok(j) => j,
                Err(_) => return,
            };
            if job.reply.is_closed() {
                continue;
            }
            let res = catch_unwind(AssertUnwindSafe(|| self.run(&job.req, &job.reply)))
                .unwrap_or_else(|_| {
                    self.reset_all();
                    Err(ModelError::Transient {
                        message: "local model worker panicked; its cache was reset".into(),
                        retry_after_sec: None,
                    })
                });
            let _ = job.reply.send(res);
        }
    }

    fn reset_all(&mut self) {
        self.ctx.clear_kv_cache();
        for s in &mut self.slots {
            s.tokens.clear();
        }
    }

    fn reset_slot(&mut self, i: usize) {
        let _ = self.ctx.clear_kv_cache_seq(Some(i as u32), None, None);
        self.slots[i].tokens.clear();
        self.slots[i].prompt_len = 0;
    }

    /// The prompt tokens of a conversation (chat template with the assistant turn opened).
    fn prompt_tokens(&self, turns: &[(String, String)]) -> Result<Vec<LlamaToken>, ModelError> {
        let msgs = turns
            .iter()
            .map(|(r, c)| LlamaChatMessage::new(r.clone(), c.replace('\0', "")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ModelError::Permanent(format!("chat message: {e}")))?;
        let text = self
            .model
            .apply_chat_template(&self.template, &msgs, true)
            .map_err(|e| ModelError::Permanent(format!("chat template: {e}")))?;
        Ok(self.model.vocab().tokenize(text.as_bytes(), true, true))
    }

    /// Picks the slot for a prompt and readies its cache; returns the slot and how many of
    /// its cached tokens the prompt shares. A slot whose whole previous prompt starts this
    /// one continues its conversation. Otherwise the least recently used slot is taken, and
    /// when another slot shares a prefix (e.g. the system prompt) that cache is copied into it.
    fn choose_slot(&mut self, tokens: &[LlamaToken]) -> (usize, usize) {
        let lcp = |s: &Slot| {
            s.tokens
                .iter()
                .zip(tokens)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let shared: Vec<usize> = self.slots.iter().map(lcp).collect();
        let continuing = (0..self.slots.len())
            .filter(|&i| shared[i] > 0 && shared[i] >= self.slots[i].prompt_len)
            .max_by_key(|&i| shared[i]);
        if let Some(i) = continuing {
            return (i, shared[i]);
        }
        let target = (0..self.slots.len())
            .min_by_key(|&i| (!self.slots[i].tokens.is_empty(), self.slots[i].last_used))
            .unwrap_or(0);
        let src = (0..self.slots.len())
            .max_by_key(|&i| shared[i])
            .unwrap_or(0);
        if shared[src] < MIN_SHARED || src == target {
            return (target, shared[target]);
        }
        // Cross-stream copies are whole-buffer copies (cheap next to re-reading the prefix).
        if self
            .ctx
            .copy_kv_cache_seq(src as i32, target as i32, None, None)
            .is_err()
        {
            return (target, 0);
        }
        let n = shared[src];
        self.slots[target].tokens = self.slots[src].tokens[..n].to_vec();
        (target, n)
    }

    /// Generates the reply to one request: takes a cache slot, reads the prompt past the
    /// prefix the slot keeps, then samples the reply.
    fn run(&mut self, req: &GenRequest, reply: &Reply) -> Result<GenOutput, ModelError> {
        let tokens = self.prompt_tokens(&req.turns)?;
        let n = tokens.len();
        let ctx = self.ctx_tokens as usize;
        let reserve = (req.max_tokens as usize).clamp(16, ctx / 4);
        if n == 0 || n + reserve > ctx {
            return Err(ModelError::ContextLength(format!(
                "the prompt has {n} tokens; with {reserve} reserved for the reply it exceeds the local model's context of {ctx} tokens"
            )));
        }
        let (slot, keep) = self.open_slot(req, &tokens)?;
        let t0 = Instant::now();
        let mut batch = LlamaBatch::new(N_BATCH, 1);
        self.prefill(slot, keep, &tokens, &mut batch, reply)?;
        let prefill_ms = t0.elapsed().as_secs_f64() * 1000.0;
        self.slots[slot].prompt_len = n;
        let out = self.sample_reply(req, reply, slot, &mut batch)?;
        Ok(GenOutput {
            text: out.text,
            prompt_tokens: n as u32,
            cached_tokens: keep as u32,
            output_tokens: out.tokens,
            cut_off: out.cut_off,
            prefill_ms,
            decode_ms: out.decode_ms,
        })
    }

    /// Chooses the slot for a prompt, marks it used and drops its cache after the prefix
    /// kept (none unless `reuse_prefix`); returns the slot and how many tokens it keeps.
    fn open_slot(
        &mut self,
        req: &GenRequest,
        tokens: &[LlamaToken],
    ) -> Result<(usize, usize), ModelError> {
        let n = tokens.len();
        let (slot, lcp) = self.choose_slot(tokens);
        let keep = if req.reuse_prefix { lcp.min(n - 1) } else { 0 };
        self.clock += 1;
        self.slots[slot].last_used = self.clock;
        if self
            .ctx
            .clear_kv_cache_seq(Some(slot as u32), Some(keep as u32), None)
            != Ok(true)
        {
            self.reset_slot(slot);
            return self.fail(slot, "cannot trim the KV cache".into());
        }
        self.slots[slot].tokens.truncate(keep);
        self.slots[slot].prompt_len = 0;
        Ok((slot, keep))
    }

    /// Decodes the prompt tokens after `keep` into the slot, [`N_BATCH`] at a time (logits
    /// for the last token only), giving up when the caller has gone.
    fn prefill(
        &mut self,
        slot: usize,
        keep: usize,
        tokens: &[LlamaToken],
        batch: &mut LlamaBatch<'_>,
        reply: &Reply,
    ) -> Result<(), ModelError> {
        let n = tokens.len();
        let seq = slot as i32;
        for start in (keep..n).step_by(N_BATCH) {
            if reply.is_closed() {
                return self.fail(slot, "request cancelled".into());
            }
            let end = (start + N_BATCH).min(n);
            batch.clear();
            for (i, t) in tokens[start..end].iter().enumerate() {
                let pos = start + i;
                batch
                    .add(*t, pos as i32, &[seq], pos == n - 1)
                    .map_err(|e| ModelError::Permanent(format!("batch: {e}")))?;
            }
            if let Err(e) = self.ctx.decode(batch) {
                return self.decode_failed(slot, e);
            }
            self.slots[slot]
                .tokens
                .extend_from_slice(&tokens[start..end]);
        }
        Ok(())
    }

    fn decode_failed<T>(&mut self, slot: usize, e: DecodeError) -> Result<T, ModelError> {
        self.reset_slot(slot);
        Err(match e {
            DecodeError::NoKvCacheSlot => ModelError::ContextLength(format!(
                "the local model's KV cache is full ({} tokens per conversation)",
                self.ctx_tokens
            )),
            e => ModelError::Transient {
                message: format!("llama.cpp decode failed: {e}"),
                retry_after_sec: None,
            },
        })
    }

    fn fail<T>(&mut self, slot: usize, message: String) -> Result<T, ModelError> {
        self.reset_slot(slot);
        Err(ModelError::Transient {
            message,
            retry_after_sec: None,
        })
    }
}
