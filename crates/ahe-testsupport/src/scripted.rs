//! A scripted OpenAI- and Anthropic-compatible HTTP server for tests.
//!
//! It listens on `127.0.0.1` (random port, [`Server::start`]), answers
//! `POST /v1/chat/completions` (and anything under it) and the Anthropic Messages route
//! `POST /v1/messages` from one queue of [`ScriptedReply`]s (or a closure), records every
//! request, and stops on drop. Replies are shaped by their constructor: [`ScriptedReply::text`]
//! is a chat completion, [`ScriptedReply::anthropic_text`] a Messages response.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

use crate::lock;
use crate::server::{RecordedRequest, Server};

/// One reply the server sends.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedReply {
    /// HTTP status.
    pub status: u16,
    /// Response body.
    pub body: String,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
    /// Delay before answering, in milliseconds.
    pub delay_ms: u64,
}

/// A chat-completions body with one choice holding `message`.
pub fn completion_body(message: Value, finish_reason: &str) -> String {
    json!({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })
    .to_string()
}

/// A Messages-API body with the given content blocks and stop reason.
pub fn anthropic_body(content: Value, stop_reason: &str) -> String {
    json!({
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "test-model",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    })
    .to_string()
}

impl ScriptedReply {
    /// A 200 Messages-API answer with one text block.
    pub fn anthropic_text(text: &str) -> ScriptedReply {
        let content = json!([{"type": "text", "text": text}]);
        ScriptedReply::json(200, anthropic_body(content, "end_turn"))
    }

    /// A 200 Messages-API answer with one `tool_use` block (id `toolu_test_0`).
    pub fn anthropic_tool_use(name: &str, input: Value) -> ScriptedReply {
        let content =
            json!([{"type": "tool_use", "id": "toolu_test_0", "name": name, "input": input}]);
        ScriptedReply::json(200, anthropic_body(content, "tool_use"))
    }

    /// An error status with an Anthropic-style error body of the given error type.
    pub fn anthropic_error(code: u16, error_type: &str, message: &str) -> ScriptedReply {
        let body = json!({"type": "error", "error": {"type": error_type, "message": message}});
        ScriptedReply::json(code, body.to_string())
    }

    /// Replaces a Messages body's `usage` (uncached input, output, cache-read input tokens).
    pub fn with_anthropic_usage(
        mut self,
        input: u64,
        output: u64,
        cache_read: u64,
    ) -> ScriptedReply {
        if let Ok(mut v) = serde_json::from_str::<Value>(&self.body) {
            v["usage"] = json!({
                "input_tokens": input,
                "output_tokens": output,
                "cache_read_input_tokens": cache_read,
                "cache_creation_input_tokens": 0,
            });
            self.body = v.to_string();
        }
        self
    }

    /// The body cut after `keep` bytes (a truncated, unparsable JSON answer).
    pub fn truncated(mut self, keep: usize) -> ScriptedReply {
        let mut k = keep.min(self.body.len());
        while !self.body.is_char_boundary(k) {
            k -= 1;
        }
        self.body.truncate(k);
        self
    }

    /// A 200 with a plain text answer.
    pub fn text(content: &str) -> ScriptedReply {
        let msg = json!({"role": "assistant", "content": content});
        ScriptedReply::json(200, completion_body(msg, "stop"))
    }

    /// A 200 with one tool call whose argument text is `args_json` (sent verbatim).
    pub fn tool_call(name: &str, args_json: &str) -> ScriptedReply {
        let msg = json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": "call_test_0",
                "type": "function",
                "function": {"name": name, "arguments": args_json},
            }],
        });
        ScriptedReply::json(200, completion_body(msg, "tool_calls"))
    }

    /// An error status with an OpenAI-style error body.
    pub fn status(code: u16) -> ScriptedReply {
        let body = json!({"error": {"message": format!("scripted status {code}"), "code": null}});
        ScriptedReply::json(code, body.to_string())
    }

    /// A 200 whose body is not JSON.
    pub fn garbage() -> ScriptedReply {
        ScriptedReply {
            status: 200,
            body: "<html>this is not json {".to_string(),
            headers: vec![("content-type".to_string(), "text/html".to_string())],
            delay_ms: 0,
        }
    }

    /// A reply with the given status and JSON body text.
    pub fn json(status: u16, body: impl Into<String>) -> ScriptedReply {
        ScriptedReply {
            status,
            body: body.into(),
            headers: vec![("content-type".to_string(), "application/json".to_string())],
            delay_ms: 0,
        }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> ScriptedReply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets the delay before answering.
    pub fn with_delay(mut self, delay_ms: u64) -> ScriptedReply {
        self.delay_ms = delay_ms;
        self
    }

    /// Replaces the body's `usage` (prompt, completion and cached prompt tokens).
    pub fn with_usage(mut self, prompt: u64, completion: u64, cached: u64) -> ScriptedReply {
        if let Ok(mut v) = serde_json::from_str::<Value>(&self.body) {
            v["usage"] = json!({
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            });
            self.body = v.to_string();
        }
        self
    }
}

/// Computes a reply from the request body and its 0-based index.
pub type ReplyFn = dyn Fn(&Value, usize) -> ScriptedReply + Send + Sync;

struct Shared {
    queue: Mutex<VecDeque<ScriptedReply>>,
    fallback: Mutex<ScriptedReply>,
    dynamic: Option<Box<ReplyFn>>,
    requests: Mutex<Vec<RecordedRequest>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running scripted server; stops when dropped.
pub struct TestServer {
    server: Server,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("port", &self.server.port())
            .finish()
    }
}

impl TestServer {
    /// Starts a server answering from `replies`, then with text "done".
    pub fn start(replies: Vec<ScriptedReply>) -> TestServer {
        TestServer::start_with_fallback(replies, ScriptedReply::text("done"))
    }

    /// Starts a server answering from `replies`, then with `fallback`.
    pub fn start_with_fallback(replies: Vec<ScriptedReply>, fallback: ScriptedReply) -> TestServer {
        TestServer::launch(replies, fallback, None)
    }

    /// Starts a server that computes every reply with `f(request_body, index)`.
    pub fn start_dynamic(
        f: impl Fn(&Value, usize) -> ScriptedReply + Send + Sync + 'static,
    ) -> TestServer {
        TestServer::launch(vec![], ScriptedReply::text("done"), Some(Box::new(f)))
    }

    fn launch(
        replies: Vec<ScriptedReply>,
        fallback: ScriptedReply,
        dynamic: Option<Box<ReplyFn>>,
    ) -> TestServer {
        let shared = Arc::new(Shared {
            queue: Mutex::new(replies.into()),
            fallback: Mutex::new(fallback),
            dynamic,
            requests: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(handle))
            .route("/v1/chat/completions/*rest", post(handle))
            .route("/v1/messages", post(handle))
            .with_state(shared.clone());
        TestServer {
            server: Server::start("ahe-testserver", app),
            shared,
        }
    }

    /// The base URL to configure, `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        self.server.url("/v1")
    }

    /// The base URL to configure for the `anthropic` provider, `http://127.0.0.1:PORT`.
    pub fn anthropic_base_url(&self) -> String {
        self.server.url("")
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The bodies of every request received so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.requests().into_iter().map(|r| r.body).collect()
    }

    /// Number of requests received so far.
    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// Most requests that were being answered at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Appends a reply to the queue.
    pub fn push(&self, reply: ScriptedReply) {
        lock(&self.shared.queue).push_back(reply);
    }

    /// Replaces the reply used when the queue is empty.
    pub fn set_fallback(&self, reply: ScriptedReply) {
        *lock(&self.shared.fallback) = reply;
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let recorded = RecordedRequest::new(&uri, &headers, &body);
    let value = recorded.body.clone();
    let index = {
        let mut reqs = lock(&shared.requests);
        reqs.push(recorded);
        reqs.len() - 1
    };
    let reply = match &shared.dynamic {
        Some(f) => f(&value, index),
        None => {
            let next = lock(&shared.queue).pop_front();
            next.unwrap_or_else(|| lock(&shared.fallback).clone())
        }
    };
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
    if reply.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(reply.delay_ms)).await;
    }
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    let mut resp = Response::new(Body::from(reply.body));
    *resp.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    for (k, v) in &reply.headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}
