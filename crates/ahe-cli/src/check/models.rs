//! `ahe check`'s model probes: each role's model answers a one-token request, transient
//! errors retried as the run would retry them.

use ahe_model::{ChatRequest, Message, ModelConfig};
use ahe_runner::config::RunConfig;

use super::Acc;

/// The longest wait between two probe attempts after a transient error.
const PROBE_MAX_WAIT_MS: u64 = 5_000;

/// How long the one-token model request may take.
const MODEL_TIMEOUT_SEC: f64 = 30.0;

/// The one-token request each role's model is sent.
const PROBE_PROMPT: &str = include_str!("../../templates/check_probe.md");

/// Each role's model answers a one-token request (distinct models asked once); the
/// trajectory judge is listed when `[models.judge]` turns it on.
pub(super) async fn check_models(cfg: &RunConfig, acc: &mut Acc) {
    let mut seen: Vec<(String, Vec<&str>, ModelConfig)> = Vec::new();
    for role in cfg.active_roles() {
        let m = cfg.model(role);
        let key = format!(
            "{}|{}|{}|{}",
            m.describe(),
            m.base_url.as_deref().unwrap_or(""),
            m.key_env(),
            m.path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
        match seen.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, roles, _)) => roles.push(role),
            None => seen.push((key, vec![role], m)),
        }
    }
    let probes = seen.into_iter().map(|(_, roles, m)| async move {
        let subject = format!("{} ({})", roles.join(", "), m.describe());
        (subject, probe_model(m, &roles).await)
    });
    for (subject, r) in futures_util::future::join_all(probes).await {
        match r {
            Ok(msg) => acc.good("model", subject, msg),
            Err(e) => acc.bad("model", subject, e),
        }
    }
}

/// The model-API role of a config role name.
fn role_of(role: &str) -> ahe_model::Role {
    match role {
        "debugger" => ahe_model::Role::Debugger,
        "evolve" => ahe_model::Role::Evolve,
        "judge" => ahe_model::Role::Judge,
        _ => ahe_model::Role::CodeAgent,
    }
}

/// A request of at most one output token, retried after transient errors as the run would;
/// mock and local models are not asked.
async fn probe_model(mut m: ModelConfig, roles: &[&str]) -> Result<String, String> {
    if let Some(r) = answer_without_request(&m) {
        return r;
    }
    m.timeout_sec = m.timeout_sec.min(MODEL_TIMEOUT_SEC);
    m.cache = ahe_model::CacheMode::Off;
    // Retried as the run retries (429, 5xx, timeouts, torn bodies: the config's counts), with
    // each wait capped so that a struggling server costs the check seconds, not minutes.
    m.backoff_max_ms = m.backoff_max_ms.min(PROBE_MAX_WAIT_MS);
    let retries = (m.max_retries, m.max_malformed_retries);
    (m.max_retries, m.max_malformed_retries) = (0, 0);
    let once = ahe_model::build_client(&m).map_err(|e| format!("{e:#}"))?;
    let req = ChatRequest {
        role: role_of(roles.first().copied().unwrap_or("code_agent")),
        messages: vec![Message::user(PROBE_PROMPT.trim())],
        tools: Vec::new(),
        protocol: Default::default(),
        temperature: None,
        max_tokens: Some(1),
        tool_choice: Default::default(),
    };
    // The first attempt alone, then (after a transient error) the rest of the run's retries.
    let mut retried = 0;
    let result = match once.chat(&req).await {
        // Nothing listens there (or DNS/TLS fails): waiting would not change the answer.
        Err(e) if e.is_retryable() && !e.is_cannot_connect() => {
            (m.max_retries, m.max_malformed_retries) = retries;
            retry_rest(&mut m, &req, e, &mut retried).await?
        }
        r => r.map(drop),
    };
    match result {
        Ok(()) => match retried {
            0 => Ok("answers a one-token request".into()),
            n => Ok(format!(
                "answers a one-token request (after {n} transient error(s), retried as the run would)"
            )),
        },
        Err(e) => {
            let msg = e.to_string();
            let env = m.key_env();
            Err(if std::env::var(&env).is_err() && !msg.contains(&env) {
                format!("{msg} ({env} is not set)")
            } else {
                msg
            })
        }
    }
}

/// The probe's answer for a model that needs no request (mock, local, a cache replay), or an
/// error when the file or directory it would read is missing; `None` for the others.
fn answer_without_request(m: &ModelConfig) -> Option<Result<String, String>> {
    match m.provider.as_str() {
        "mock" => return Some(Ok("mock model: no request needed".into())),
        "local" => {
            return Some(match &m.path {
                Some(p) if !p.is_file() => Err(format!(
                    "model file {} does not exist (scripts/fetch-model.sh fetches the default)",
                    p.display()
                )),
                _ => Ok("local model: not loaded by the check".into()),
            })
        }
        _ => {}
    }
    if m.cache == ahe_model::CacheMode::Replay {
        return Some(match &m.cache_dir {
            Some(d) if !d.is_dir() => Err(format!(
                "cache = \"replay\": the cache directory {} does not exist",
                d.display()
            )),
            _ => Ok("replays from its recording: no request needed".into()),
        });
    }
    None
}

/// After the transient error `first`, the request again with the rest of the config's retries
/// of that kind (`m` holds its full counts); `retried` becomes how many were made.
async fn retry_rest(
    m: &mut ModelConfig,
    req: &ChatRequest,
    first: ahe_model::ModelError,
    retried: &mut u64,
) -> Result<Result<(), ahe_model::ModelError>, String> {
    let malformed = matches!(first, ahe_model::ModelError::Malformed(_));
    let left = if malformed {
        &mut m.max_malformed_retries
    } else {
        &mut m.max_retries
    };
    let Some(n) = left.checked_sub(1) else {
        return Ok(Err(first));
    };
    *left = n;
    let rest = ahe_model::build_client(m).map_err(|e| format!("{e:#}"))?;
    let r = rest.chat(req).await;
    *retried = rest.stats().retries + 1;
    let retried = *retried;
    Ok(r.map(drop).map_err(|last| {
        ahe_model::ModelError::Permanent(format!(
            "{last} (still failing after {retried} retries; first: {first})"
        ))
    }))
}
