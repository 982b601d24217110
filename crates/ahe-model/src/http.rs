//! HTTP plumbing shared by the `openai` and `anthropic` providers: sending a request,
//! mapping statuses to error classes, Retry-After, and key-safe error excerpts.

use crate::types::ModelError;

/// Longest body excerpt quoted in error messages, in characters.
pub(crate) const EXCERPT_CHARS: usize = 500;

/// What came back from one HTTP exchange.
pub(crate) struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Retry-After in seconds, when given.
    pub retry_after: Option<f64>,
    /// Body text.
    pub body: String,
}

/// Sends the request; a connection failure or an unreadable body is transient.
pub(crate) async fn send(rb: reqwest::RequestBuilder, url: &str) -> Result<Answer, ModelError> {
    let resp = rb.send().await.map_err(|e| map_send_error(e, url))?;
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let body = resp.text().await.map_err(|e| ModelError::Transient {
        message: format!("reading the response from {url} failed: {e}"),
        retry_after_sec: None,
    })?;
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

/// The endpoint's identity, for error messages.
pub(crate) struct Endpoint<'a> {
    /// Full URL called.
    pub url: &'a str,
    /// Model name.
    pub model: &'a str,
    /// Name of the env var holding the key.
    pub key_env: &'a str,
}

/// Maps a non-success HTTP status and body to a `ModelError` (the key is never quoted):
/// 429/5xx transient (with Retry-After), 401/403 permanent naming the key's env var,
/// 404 permanent naming URL and model, a context-length 400/413 `ContextLength`,
/// anything else permanent.
pub(crate) fn status_error(
    ep: &Endpoint<'_>,
    status: u16,
    retry_after: Option<f64>,
    body: &str,
    key: Option<&str>,
) -> ModelError {
    let url = ep.url;
    let excerpt = redact(&excerpt(body), key);
    match status {
        429 | 500..=599 => ModelError::Transient {
            message: format!("HTTP {status} from {url}: {excerpt}"),
            retry_after_sec: retry_after,
        },
        401 | 403 => {
            let hint = if key.is_some() {
                format!("check {}", ep.key_env)
            } else {
                format!("check {} (it is not set)", ep.key_env)
            };
            ModelError::Permanent(format!("HTTP {status} (not authorized) from {url}: {hint}"))
        }
        404 => ModelError::Permanent(format!(
            "HTTP 404 from {url} for model `{}`: check base_url and the model name: {excerpt}",
            ep.model
        )),
        400 | 413 if is_context_length(body) => {
            ModelError::ContextLength(format!("model `{}` at {url}: {excerpt}", ep.model))
        }
        _ => ModelError::Permanent(format!("HTTP {status} from {url}: {excerpt}")),
    }
}

/// Parses a Retry-After value given in (possibly fractional) seconds.
pub fn parse_retry_after(v: &str) -> Option<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
}

/// Whether an error body says the prompt outgrew the context window (OpenAI-compatible
/// servers and Anthropic phrase it differently).
pub(crate) fn is_context_length(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "prompt is too long",
        "context window",
    ]
    .iter()
    .any(|p| b.contains(p))
}

pub(crate) fn map_send_error(e: reqwest::Error, url: &str) -> ModelError {
    if e.is_builder() {
        ModelError::Permanent(format!("invalid request to {url}: {e}"))
    } else if e.is_connect() {
        ModelError::Transient {
            message: format!("{} {url}: {e}", crate::types::CANNOT_CONNECT),
            retry_after_sec: None,
        }
    } else {
        ModelError::Transient {
            message: format!("request to {url} failed: {e}"),
            retry_after_sec: None,
        }
    }
}

/// The first [`EXCERPT_CHARS`] characters of a body, trimmed.
pub(crate) fn excerpt(body: &str) -> String {
    let t = body.trim();
    match t.char_indices().nth(EXCERPT_CHARS) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_string(),
    }
}

/// Replaces every occurrence of the key in `text` (servers sometimes echo it).
pub(crate) fn redact(text: &str, key: Option<&str>) -> String {
    match key {
        Some(k) if k.len() >= 4 => text.replace(k, "[redacted]"),
        _ => text.to_string(),
    }
}

/// The key from its env var (unset or empty = none).
pub(crate) fn key_from_env(key_env: &str) -> Option<String> {
    std::env::var(key_env).ok().filter(|k| !k.is_empty())
}

/// A malformed-body error with the key redacted and the URL named.
pub(crate) fn malformed_at(e: ModelError, url: &str, key: Option<&str>) -> ModelError {
    match e {
        ModelError::Malformed(m) => {
            ModelError::Malformed(format!("from {url}: {}", redact(&m, key)))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> Endpoint<'static> {
        Endpoint {
            url: "http://x/v1/chat/completions",
            model: "m1",
            key_env: "AHE_TEST_KEY_UNIT",
        }
    }

    #[test]
    fn status_mapping() {
        let e = status_error(&ep(), 429, Some(2.0), "slow down", None);
        assert_eq!(
            e,
            ModelError::Transient {
                message: "HTTP 429 from http://x/v1/chat/completions: slow down".into(),
                retry_after_sec: Some(2.0)
            }
        );
        assert_eq!(
            status_error(&ep(), 503, None, "", None).class(),
            "transient"
        );
        assert_eq!(
            status_error(&ep(), 529, None, "", None).class(),
            "transient"
        );
        let e = status_error(
            &ep(),
            401,
            None,
            "bad key sk-secret-123",
            Some("sk-secret-123"),
        );
        let m = e.to_string();
        assert_eq!(e.class(), "permanent");
        assert!(
            m.contains("AHE_TEST_KEY_UNIT") && !m.contains("sk-secret-123"),
            "{m}"
        );
        let m = status_error(&ep(), 403, None, "", None).to_string();
        assert!(m.contains("AHE_TEST_KEY_UNIT (it is not set)"), "{m}");
        let m = status_error(&ep(), 404, None, "", None).to_string();
        assert!(
            m.contains("m1") && m.contains("http://x/v1/chat/completions"),
            "{m}"
        );
        let body = r#"{"error":{"code":"context_length_exceeded"}}"#;
        assert_eq!(
            status_error(&ep(), 400, None, body, None).class(),
            "context_length"
        );
        let e = status_error(
            &ep(),
            400,
            None,
            "This model's maximum context length is 8k",
            None,
        );
        assert_eq!(e.class(), "context_length");
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert_eq!(
            status_error(&ep(), 400, None, body, None).class(),
            "context_length"
        );
        assert_eq!(
            status_error(&ep(), 400, None, "bad field", None).class(),
            "permanent"
        );
        let m = status_error(&ep(), 422, None, "bad field k-XYZW", Some("k-XYZW")).to_string();
        assert!(m.contains("bad field") && !m.contains("k-XYZW"), "{m}");
    }

    #[test]
    fn helpers() {
        assert_eq!(parse_retry_after(" 3 "), Some(3.0));
        assert_eq!(parse_retry_after("0.25"), Some(0.25));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(excerpt(&"é".repeat(600)).chars().count(), EXCERPT_CHARS + 1);
        assert_eq!(
            redact("a secret-key b", Some("secret-key")),
            "a [redacted] b"
        );
        assert_eq!(redact("abc", Some("ab")), "abc");
        let m = malformed_at(
            ModelError::Malformed("x KEY1".into()),
            "http://u",
            Some("KEY1"),
        );
        assert_eq!(
            m,
            ModelError::Malformed("from http://u: x [redacted]".into())
        );
    }
}
