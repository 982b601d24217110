//! Record/replay: a content-addressed store of responses, keyed by the request's hash.
//!
//! The key is the SHA-256 of a canonical JSON document (sorted keys, no whitespace) of the
//! provider, model, messages, tools, tool protocol, temperature and max_tokens, plus — only
//! when set, so recordings made before they existed still replay — the tool choice, the
//! provider items carried in assistant turns (thinking blocks, reasoning items) and the
//! settings that change an answer (`top_p`, `reasoning_effort`, `reasoning_summary`,
//! `extra_body`, `thinking_budget_tokens`, `api = "responses"`; see
//! [`crate::ModelConfig::answer_settings`]). It leaves out the API key, the base URL, the
//! role, prompt caching (billing only) and every timing or retry setting.
//!
//! Identical requests are not collapsed into one answer: k trials of a task start with the
//! same request, and a stochastic model must still answer each on its own. So the store
//! keeps one entry per occurrence: the first at `<dir>/<first 2 hex digits>/<hash>.json`,
//! the n-th (n ≥ 1, counted from 0) at `<dir>/<2 hex>/<hash>.<n>.json`, and the n-th time a
//! process sends a request it gets occurrence n.
//!
//! - `record`: occurrence n is answered from the store when it exists (re-recording, or a
//!   resumed run); otherwise the provider is called and the answer stored (atomic writes;
//!   a failed call claims no occurrence, so the client's retries leave no gaps).
//! - `replay`: answers only from the store, never from the network; when a request was
//!   recorded fewer times than it is now sent (a recording that was resumed restarted its
//!   count), occurrences are reused cyclically. A request never recorded is a permanent
//!   error naming its hash and the directory.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::config::CacheMode;
use crate::types::{ChatRequest, ChatResponse, ModelError, Provider};

/// Version of the key document; bump when its fields change.
const KEY_VERSION: u32 = 1;

/// One stored entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The request hash (also the file name).
    pub hash: String,
    /// Which occurrence of the request this answers (0 = the first).
    #[serde(default)]
    pub occurrence: u32,
    /// Provider and model, e.g. `openai:gpt-4o`.
    pub model: String,
    /// The response (its `cost_usd` is recomputed by the client from the configured prices).
    pub response: ChatResponse,
}

/// The canonical JSON text a request is hashed over (no answer settings).
pub fn canonical_request(provider: &str, model: &str, req: &ChatRequest) -> String {
    canonical_request_with(provider, model, &json!({}), req)
}

/// [`canonical_request`] with the config's answer settings (an object; empty = none).
pub fn canonical_request_with(
    provider: &str,
    model: &str,
    settings: &Value,
    req: &ChatRequest,
) -> String {
    let mut doc = json!({
        "v": KEY_VERSION,
        "provider": provider,
        "model": model,
        "messages": req.messages,
        "tools": req.tools,
        "protocol": req.protocol,
        "temperature": req.temperature,
        "max_tokens": req.max_tokens,
    });
    // Only when set, so the keys of earlier recordings stay valid.
    if !req.tool_choice.is_auto() {
        doc["tool_choice"] = json!(req.tool_choice);
    }
    if settings.as_object().is_some_and(|m| !m.is_empty()) {
        doc["settings"] = settings.clone();
    }
    let mut out = String::new();
    write_canonical(&doc, &mut out);
    out
}

/// SHA-256 (lower-case hex) of [`canonical_request`].
pub fn request_hash(provider: &str, model: &str, req: &ChatRequest) -> String {
    request_hash_with(provider, model, &json!({}), req)
}

/// SHA-256 (lower-case hex) of [`canonical_request_with`].
pub fn request_hash_with(
    provider: &str,
    model: &str,
    settings: &Value,
    req: &ChatRequest,
) -> String {
    hex::encode(Sha256::digest(
        canonical_request_with(provider, model, settings, req).as_bytes(),
    ))
}

/// Object keys sorted at every level, compact separators.
fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A provider answering from (and, in `record` mode, filling) a response store.
pub struct CachedProvider {
    inner: Arc<dyn Provider>,
    mode: CacheMode,
    dir: PathBuf,
    provider: String,
    model: String,
    /// Answer settings in the key (see [`canonical_request_with`]).
    settings: Value,
    /// Occurrences of each hash handed out so far by this process.
    seen: Mutex<HashMap<String, u32>>,
}

impl CachedProvider {
    /// Wraps `inner` (named `provider`/`model` in the key) with a store under `dir`.
    pub fn new(
        inner: Arc<dyn Provider>,
        mode: CacheMode,
        dir: PathBuf,
        provider: &str,
        model: &str,
    ) -> CachedProvider {
        CachedProvider {
            inner,
            mode,
            dir,
            provider: provider.to_string(),
            model: model.to_string(),
            settings: json!({}),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Puts the config's answer settings into every key (see [`canonical_request_with`]).
    pub fn with_settings(mut self, settings: Value) -> CachedProvider {
        self.settings = settings;
        self
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where occurrence `n` (0 = the first) of the request `hash` is stored.
    pub fn entry_path(&self, hash: &str, n: u32) -> PathBuf {
        let name = match n {
            0 => format!("{hash}.json"),
            n => format!("{hash}.{n}.json"),
        };
        self.dir.join(&hash[..2]).join(name)
    }

    /// How many occurrences of `hash` are stored (0, 1, ... until the first gap).
    pub fn recorded(&self, hash: &str) -> u32 {
        (0..)
            .find(|&n| !self.entry_path(hash, n).is_file())
            .unwrap_or(0)
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn load(&self, hash: &str, n: u32) -> Result<ChatResponse, ModelError> {
        let path = self.entry_path(hash, n);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            ModelError::Permanent(format!("model cache: cannot read {}: {e}", path.display()))
        })?;
        let entry: CacheEntry = serde_json::from_str(&text).map_err(|e| {
            ModelError::Permanent(format!(
                "model cache: {} is corrupt ({e}); delete it to record again",
                path.display()
            ))
        })?;
        Ok(entry.response)
    }

    /// Stores `resp` as occurrence `n` unless it exists (another process recording into the
    /// same store); returns what the store holds.
    fn store(&self, hash: &str, n: u32, resp: ChatResponse) -> Result<ChatResponse, ModelError> {
        let path = self.entry_path(hash, n);
        let fail = |what: &str, e: std::io::Error| {
            ModelError::Permanent(format!(
                "model cache: cannot {what} {}: {e}",
                path.display()
            ))
        };
        let parent = path.parent().expect("entry path has a parent");
        std::fs::create_dir_all(parent).map_err(|e| fail("create the directory of", e))?;
        let entry = CacheEntry {
            hash: hash.to_string(),
            occurrence: n,
            model: self.inner.describe(),
            response: ChatResponse {
                cost_usd: 0.0,
                ..resp
            },
        };
        let text = serde_json::to_vec_pretty(&entry).expect("entry serializes");
        let mut tmp = tempfile::NamedTempFile::new_in(parent).map_err(|e| fail("write", e))?;
        tmp.write_all(&text).map_err(|e| fail("write", e))?;
        match tmp.persist_noclobber(&path) {
            Ok(_) => Ok(entry.response),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => self.load(hash, n),
            Err(e) => Err(fail("write", e.error)),
        }
    }

    async fn replay(&self, hash: &str) -> Result<ChatResponse, ModelError> {
        let n = {
            let mut seen = self.seen();
            let c = seen.entry(hash.to_string()).or_default();
            *c += 1;
            *c - 1
        };
        match self.recorded(hash) {
            0 => Err(ModelError::Permanent(format!(
                "model cache replay: no recorded response for request {hash} in {} \
                 (record it first with cache = \"record\", or point cache_dir at the \
                 recording run's model-cache/)",
                self.dir.display()
            ))),
            stored => self.load(hash, n % stored),
        }
    }

    async fn record(&self, hash: &str, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let stored = {
            let mut seen = self.seen();
            let c = seen.entry(hash.to_string()).or_default();
            if self.entry_path(hash, *c).is_file() {
                *c += 1;
                Some(*c - 1)
            } else {
                None
            }
        };
        if let Some(n) = stored {
            return self.load(hash, n);
        }
        let resp = self.inner.chat(req).await?;
        let n = {
            let mut seen = self.seen();
            let c = seen.entry(hash.to_string()).or_default();
            *c += 1;
            *c - 1
        };
        self.store(hash, n, resp)
    }
}

#[async_trait::async_trait]
impl Provider for CachedProvider {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ModelError> {
        let hash = request_hash_with(&self.provider, &self.model, &self.settings, req);
        match self.mode {
            CacheMode::Replay => self.replay(&hash).await,
            CacheMode::Record | CacheMode::Off => self.record(&hash, req).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Message, Role, ToolProtocol, ToolSpec, Usage};
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counter(AtomicUsize);

    #[async_trait::async_trait]
    impl Provider for Counter {
        fn describe(&self) -> String {
            "count:m".into()
        }
        async fn chat(&self, _req: &ChatRequest) -> Result<ChatResponse, ModelError> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            Ok(ChatResponse {
                content: Some(format!("answer {n}")),
                tool_calls: vec![],
                usage: Usage {
                    input_tokens: 7,
                    cached_input_tokens: 2,
                    output_tokens: 3,
                    ..Default::default()
                },
                finish_reason: Some("stop".into()),
                cost_usd: 1.5,
                opaque: vec![],
            })
        }
    }

    fn req(text: &str) -> ChatRequest {
        ChatRequest {
            role: Role::CodeAgent,
            messages: vec![Message::system("s"), Message::user(text)],
            tools: vec![ToolSpec {
                name: "t".into(),
                description: "d".into(),
                input_schema: json!({"type": "object", "b": 1, "a": 2}),
            }],
            protocol: ToolProtocol::Native,
            temperature: Some(0.5),
            max_tokens: None,
            tool_choice: Default::default(),
        }
    }

    fn cached(dir: &Path, mode: CacheMode, first_answer: usize) -> (CachedProvider, Arc<Counter>) {
        let inner = Arc::new(Counter(AtomicUsize::new(first_answer)));
        let p = CachedProvider::new(inner.clone(), mode, dir.into(), "openai", "m");
        (p, inner)
    }

    async fn answer(p: &CachedProvider, text: &str) -> String {
        p.chat(&req(text)).await.unwrap().content.unwrap()
    }

    #[test]
    fn keys_of_recordings_made_before_the_frontier_fields_are_unchanged() {
        // The key document of a plain request, byte for byte as KEY_VERSION 1 wrote it.
        let r = ChatRequest {
            role: Role::CodeAgent,
            messages: vec![Message::system("s"), Message::user("hi")],
            tools: vec![],
            protocol: ToolProtocol::Native,
            temperature: None,
            max_tokens: Some(5),
            tool_choice: Default::default(),
        };
        let old = r#"{"max_tokens":5,"messages":[{"content":"s","role":"system"},{"content":"hi","role":"user"}],"model":"m","protocol":"native","provider":"openai","temperature":null,"tools":[],"v":1}"#;
        assert_eq!(canonical_request("openai", "m", &r), old);
        // A config with none of the new answer settings keys the same.
        let cfg = crate::ModelConfig::from_spec("anthropic:m").unwrap();
        assert_eq!(
            canonical_request_with("openai", "m", &cfg.answer_settings(), &r),
            old
        );
    }

    #[test]
    fn hash_is_canonical_and_covers_the_request() {
        let a = req("hi");
        let h = request_hash("openai", "m", &a);
        assert_eq!(h.len(), 64);
        let c = canonical_request("openai", "m", &a);
        assert!(
            c.contains(r#""input_schema":{"a":2,"b":1,"type":"object"}"#),
            "{c}"
        );
        // The role (and anything else not in the key) does not change the hash ...
        let mut b = a.clone();
        b.role = Role::Evolve;
        assert_eq!(request_hash("openai", "m", &b), h);
        // ... every keyed field does.
        let mut variants = vec![req("ho")];
        let mut x = a.clone();
        x.temperature = Some(0.6);
        variants.push(x);
        let mut x = a.clone();
        x.max_tokens = Some(10);
        variants.push(x);
        let mut x = a.clone();
        x.protocol = ToolProtocol::JsonInText;
        variants.push(x);
        let mut x = a.clone();
        x.tools.clear();
        variants.push(x);
        let mut x = a.clone();
        x.tool_choice = crate::types::ToolChoice::None;
        variants.push(x);
        // The default tool choice is not in the key: recordings made before it existed match.
        assert!(!c.contains("tool_choice"), "{c}");
        for v in &variants {
            assert_ne!(request_hash("openai", "m", v), h);
        }
        assert_ne!(request_hash("anthropic", "m", &a), h);
        // Answer settings and carried provider items count only when present.
        assert_eq!(request_hash_with("openai", "m", &json!({}), &a), h);
        let s = json!({"reasoning_effort": "high"});
        assert_ne!(request_hash_with("openai", "m", &s, &a), h);
        let mut x = a.clone();
        x.messages
            .push(Message::assistant(Some("a".into()), vec![]));
        let plain = request_hash("openai", "m", &x);
        assert!(!canonical_request("openai", "m", &x).contains("opaque"));
        x.messages[2] = Message::Assistant {
            content: Some("a".into()),
            tool_calls: vec![],
            opaque: vec![json!({"type": "thinking", "thinking": "t", "signature": "s"})],
        };
        assert_ne!(request_hash("openai", "m", &x), plain);
        assert_ne!(request_hash("openai", "m2", &a), h);
    }

    #[tokio::test]
    async fn record_keeps_each_occurrence_and_replay_answers_in_order() {
        let d = tempfile::tempdir().unwrap();
        let (rec, inner) = cached(d.path(), CacheMode::Record, 0);
        // Two identical requests (two trials of one task) get two answers of their own.
        assert_eq!(answer(&rec, "one").await, "answer 0");
        assert_eq!(answer(&rec, "one").await, "answer 1");
        assert_eq!(answer(&rec, "two").await, "answer 2");
        assert_eq!(inner.0.load(Ordering::SeqCst), 3);
        let h = request_hash("openai", "m", &req("one"));
        assert_eq!(rec.recorded(&h), 2);
        let first = d.path().join(&h[..2]).join(format!("{h}.json"));
        let second = d.path().join(&h[..2]).join(format!("{h}.1.json"));
        assert_eq!(
            (rec.entry_path(&h, 0), rec.entry_path(&h, 1)),
            (first.clone(), second)
        );
        let entry: CacheEntry =
            serde_json::from_str(&std::fs::read_to_string(&first).unwrap()).unwrap();
        assert_eq!((entry.hash.as_str(), entry.occurrence), (h.as_str(), 0));
        assert_eq!(entry.model, "count:m");
        assert_eq!(entry.response.usage.input_tokens, 7);
        assert_eq!(entry.response.cost_usd, 0.0);

        // A new process recording into the same store reuses what is there, then calls.
        let (again, inner2) = cached(d.path(), CacheMode::Record, 100);
        assert_eq!(answer(&again, "one").await, "answer 0");
        assert_eq!(answer(&again, "one").await, "answer 1");
        assert_eq!(answer(&again, "one").await, "answer 100");
        assert_eq!(inner2.0.load(Ordering::SeqCst), 101);

        // Replay: occurrences in order, cycling past the recorded count; never the provider.
        let (rep, fresh) = cached(d.path(), CacheMode::Replay, 500);
        for want in ["answer 0", "answer 1", "answer 100", "answer 0"] {
            assert_eq!(answer(&rep, "one").await, want);
        }
        assert_eq!(answer(&rep, "two").await, "answer 2");
        let e = rep.chat(&req("three")).await.unwrap_err();
        let h3 = request_hash("openai", "m", &req("three"));
        assert_eq!(e.class(), "permanent");
        let m = e.to_string();
        assert!(
            m.contains(&h3) && m.contains(&d.path().display().to_string()),
            "{m}"
        );
        assert_eq!(
            fresh.0.load(Ordering::SeqCst),
            500,
            "replay never calls the provider"
        );
        assert_eq!(rep.describe(), "count:m");

        std::fs::write(&first, "{oops").unwrap();
        let (rep, _) = cached(d.path(), CacheMode::Replay, 0);
        let e = rep.chat(&req("one")).await.unwrap_err();
        assert!(e.to_string().contains("corrupt"), "{e}");
    }

    #[tokio::test]
    async fn a_failed_call_claims_no_occurrence_and_writers_never_clobber() {
        struct FailOnce(AtomicUsize);
        #[async_trait::async_trait]
        impl Provider for FailOnce {
            fn describe(&self) -> String {
                "failonce:m".into()
            }
            async fn chat(&self, _req: &ChatRequest) -> Result<ChatResponse, ModelError> {
                if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err(ModelError::Malformed("cut".into()));
                }
                Ok(ChatResponse {
                    content: Some("ok".into()),
                    tool_calls: vec![],
                    usage: Usage::default(),
                    finish_reason: None,
                    cost_usd: 0.0,
                    opaque: vec![],
                })
            }
        }
        let d = tempfile::tempdir().unwrap();
        let p = CachedProvider::new(
            Arc::new(FailOnce(AtomicUsize::new(0))),
            CacheMode::Record,
            d.path().into(),
            "openai",
            "m",
        );
        assert_eq!(p.chat(&req("x")).await.unwrap_err().class(), "malformed");
        assert_eq!(p.chat(&req("x")).await.unwrap().content.unwrap(), "ok");
        let h = request_hash("openai", "m", &req("x"));
        assert_eq!(p.recorded(&h), 1, "the retry is occurrence 0");

        let resp = |s: &str| ChatResponse {
            content: Some(s.into()),
            tool_calls: vec![],
            usage: Usage::default(),
            finish_reason: None,
            cost_usd: 0.0,
            opaque: vec![],
        };
        assert_eq!(
            p.store(&h, 5, resp("first")).unwrap().content.unwrap(),
            "first"
        );
        assert_eq!(
            p.store(&h, 5, resp("second")).unwrap().content.unwrap(),
            "first"
        );
        let files: Vec<_> = std::fs::read_dir(d.path().join(&h[..2])).unwrap().collect();
        assert_eq!(files.len(), 2, "no temp files left behind");
    }
}
