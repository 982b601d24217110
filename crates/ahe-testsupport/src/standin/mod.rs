//! Strict stand-ins for the frontier model APIs: a real HTTP server on `127.0.0.1`
//! ([`Server::start`]) speaking OpenAI chat completions (`/v1/chat/completions`), the
//! OpenAI Responses API (`/v1/responses`) and Anthropic Messages (`/v1/messages`), written
//! from the published references (shared/reference/model-apis.md).
//!
//! Each route rejects what the real service rejects, with its error shape (HTTP 400 and
//! `{"error": {message, type, param, code}}` for OpenAI, `{"type": "error", "error": {type,
//! message}}` for Anthropic): `max_tokens` or a non-default temperature for a reasoning
//! model, unknown parameters, a tool result without its call, a call without its result,
//! thinking on but the previous assistant turn's thinking block missing or altered, more
//! than 4 cache breakpoints, reasoning items missing or tampered with. It reports prompt
//! cache reads as the real ones do: OpenAI's automatic prefix cache (from 1024 tokens, in
//! 128-token steps) and Anthropic's breakpoint cache (writes at breakpoints, reads of the
//! longest earlier-written prefix within 20 blocks before a breakpoint; 1024 tokens minimum,
//! 2048 for Haiku). Tokens are counted as 4 characters each.
//!
//! Only the model's answers are mocked: a [`Brain`] (by default a [`MockProvider`]) turns
//! the request, translated to a [`ChatRequest`] of the server's role, into a reply.

mod anthropic;
mod chat;
mod prefix;
mod responses;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ahe_model::mock::MockProvider;
use ahe_model::types::{ChatRequest, ChatResponse, ModelError, Role};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::lock;
use crate::server::{RecordedRequest, Server};

pub use prefix::{tokens, PrefixCache};

/// Computes the model's answer to a translated request.
pub type Brain = dyn Fn(&ChatRequest) -> Result<ChatResponse, ModelError> + Send + Sync;

/// What a stand-in accepts beyond the published defaults.
#[derive(Clone)]
pub struct StandInOptions {
    /// Role of the translated requests (the brain's view).
    pub role: Role,
    /// Top-level request fields accepted besides the API's own (an OpenRouter-like server).
    pub extra_fields: Vec<String>,
    /// API key the server requires (`Authorization: Bearer` / `x-api-key`), if any.
    pub api_key: Option<String>,
}

impl Default for StandInOptions {
    fn default() -> Self {
        StandInOptions {
            role: Role::CodeAgent,
            extra_fields: vec![],
            api_key: None,
        }
    }
}

/// One exchange: the request and the reply the stand-in sent.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The request.
    pub request: RecordedRequest,
    /// HTTP status sent.
    pub status: u16,
    /// Body sent.
    pub reply: Value,
}

pub(crate) struct Shared {
    opts: StandInOptions,
    brain: Box<Brain>,
    exchanges: Mutex<Vec<Exchange>>,
    /// Prompt caches, one per API (they are separate services).
    caches: Mutex<BTreeMap<&'static str, PrefixCache>>,
    /// Responses API: function-call item id -> the reasoning item id issued with it.
    fc_reasoning: Mutex<BTreeMap<String, String>>,
    /// Counter for item ids.
    next_id: Mutex<u64>,
}

/// A running stand-in server; stops when dropped.
pub struct StandIn {
    server: Server,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StandIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandIn")
            .field("port", &self.server.port())
            .finish()
    }
}

/// The HMAC-like tag the stand-in signs thinking blocks and reasoning items with.
pub(crate) fn sign(what: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"ahe-standin-signing-key\0");
    h.update(what.as_bytes());
    hex::encode(h.finalize())
}

impl StandIn {
    /// Starts a stand-in whose answers come from `brain`.
    pub fn start(
        opts: StandInOptions,
        brain: impl Fn(&ChatRequest) -> Result<ChatResponse, ModelError> + Send + Sync + 'static,
    ) -> StandIn {
        let shared = Arc::new(Shared {
            opts,
            brain: Box::new(brain),
            exchanges: Mutex::new(Vec::new()),
            caches: Mutex::new(BTreeMap::new()),
            fc_reasoning: Mutex::new(BTreeMap::new()),
            next_id: Mutex::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .route("/v1/responses", post(handle))
            .route("/v1/messages", post(handle))
            .with_state(shared.clone());
        StandIn {
            server: Server::start("ahe-standin", app),
            shared,
        }
    }

    /// Starts a stand-in answering as `mock` does for `opts.role`.
    pub fn with_mock(opts: StandInOptions, mock: MockProvider) -> StandIn {
        StandIn::start(opts, move |req| mock.answer(req))
    }

    /// The openai `base_url`, `http://127.0.0.1:PORT/v1`.
    pub fn openai_base_url(&self) -> String {
        self.server.url("/v1")
    }

    /// The anthropic `base_url`, `http://127.0.0.1:PORT`.
    pub fn anthropic_base_url(&self) -> String {
        self.server.url("")
    }

    /// Every exchange so far, in arrival order.
    pub fn exchanges(&self) -> Vec<Exchange> {
        lock(&self.shared.exchanges).clone()
    }

    /// The last exchange, if any.
    pub fn last(&self) -> Option<Exchange> {
        lock(&self.shared.exchanges).last().cloned()
    }
}

/// An OpenAI-style error reply.
pub(crate) fn openai_error(
    status: u16,
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> (u16, Value) {
    (
        status,
        json!({"error": {"message": message, "type": kind, "param": param, "code": code}}),
    )
}

/// An OpenAI 400 `invalid_request_error`.
pub(crate) fn bad_request(message: &str, param: Option<&str>, code: Option<&str>) -> (u16, Value) {
    openai_error(400, message, "invalid_request_error", param, code)
}

/// An Anthropic-style error reply.
pub(crate) fn anthropic_error(status: u16, kind: &str, message: &str) -> (u16, Value) {
    (
        status,
        json!({"type": "error", "error": {"type": kind, "message": message},
               "request_id": "req_standin"}),
    )
}

impl Shared {
    pub(super) fn answer(&self, req: &ChatRequest) -> Result<ChatResponse, (u16, Value)> {
        (self.brain)(req).map_err(|e| {
            openai_error(
                500,
                &format!("stand-in brain failed: {e}"),
                "server_error",
                None,
                None,
            )
        })
    }

    pub(super) fn next_id(&self) -> u64 {
        let mut n = lock(&self.next_id);
        *n += 1;
        *n
    }

    pub(super) fn with_cache<R>(
        &self,
        api: &'static str,
        f: impl FnOnce(&mut PrefixCache) -> R,
    ) -> R {
        let mut caches = lock(&self.caches);
        f(caches.entry(api).or_default())
    }
}

/// Tokens a brain's answer is billed for (text and call arguments; at least 1).
pub(crate) fn answer_tokens(r: &ChatResponse) -> u64 {
    let mut n = tokens(r.content.as_deref().unwrap_or(""));
    for c in &r.tool_calls {
        n += tokens(&c.name) + tokens(&c.arguments.to_string());
    }
    n.max(1)
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = RecordedRequest::new(&uri, &headers, &body);
    let path = request.path.clone();
    let (status, reply) = {
        let s = shared.clone();
        let req = request.clone();
        tokio::task::spawn_blocking(move || match path.as_str() {
            "/v1/chat/completions" => chat::handle(&s, &req),
            "/v1/responses" => responses::handle(&s, &req),
            _ => anthropic::handle(&s, &req),
        })
        .await
        .unwrap_or_else(|e| {
            openai_error(
                500,
                &format!("stand-in panicked: {e}"),
                "server_error",
                None,
                None,
            )
        })
    };
    lock(&shared.exchanges).push(Exchange {
        request,
        status,
        reply: reply.clone(),
    });
    let mut resp = Response::new(Body::from(reply.to_string()));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The OpenAI key check: `None` when the server needs no key or the bearer token matches.
pub(super) fn openai_auth(s: &Shared, req: &RecordedRequest) -> Option<(u16, Value)> {
    let want = s.opts.api_key.as_deref()?;
    let got = req
        .header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "));
    (got != Some(want)).then(|| {
        openai_error(
            401,
            "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            None,
            Some("invalid_api_key"),
        )
    })
}

/// Whether `model` is an OpenAI reasoning family (see [`ahe_model::config::frontier::is_reasoning_model`]).
pub(crate) fn reasoning_model(model: &str) -> bool {
    ahe_model::config::frontier::is_reasoning_model(model)
}

/// Reasoning tokens the stand-in "spends" at an effort level (medium by default).
pub(crate) fn reasoning_spend(effort: Option<&str>) -> u64 {
    match effort {
        Some("none") | Some("minimal") => 0,
        Some("low") => 16,
        Some("high") => 256,
        Some("xhigh") => 512,
        _ => 64,
    }
}
