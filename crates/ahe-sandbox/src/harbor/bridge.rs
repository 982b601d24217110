//! One bridge process (`scripts/harbor/bridge.py` run by a Harbor venv's python) and its
//! JSON-lines protocol: requests carry an id, answers come back in any order with that id.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};

/// The bridge's source, shipped inside `ahe` (written next to the live records at start).
pub(crate) const SOURCE: &str = include_str!("../../../../scripts/harbor/bridge.py");

/// What a failed request says: whose fault and the provider's message.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    /// `setup`, `backend`, `protocol`, or `lost` (the bridge died).
    pub kind: String,
    /// Harbor's or the provider's message.
    pub message: String,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A running bridge.
pub(crate) struct Bridge {
    tx: Mutex<Option<mpsc::UnboundedSender<String>>>,
    pending: Pending,
    next: AtomicU64,
    dead: watch::Receiver<Option<String>>,
    pid: Option<u32>,
}

/// Writes the bridge's source into `dir` (once per content) and returns its path.
pub(crate) fn script_in(dir: &Path) -> std::io::Result<PathBuf> {
    use sha2::Digest;
    let hash = hex::encode(&sha2::Sha256::digest(SOURCE.as_bytes())[..6]);
    let path = dir.join(format!("bridge-{hash}.py"));
    if !path.is_file() {
        let tmp = dir.join(format!(".bridge-{hash}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, SOURCE)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
}

impl Bridge {
    /// Starts `python script`, its stderr appended to `log`.
    pub(crate) fn start(
        python: &Path,
        script: &Path,
        log: PathBuf,
    ) -> std::io::Result<Arc<Bridge>> {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let mut child: Child = Command::new(python)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            // Harbor's LiteLLM import must not fetch its price list (no network here).
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("PYTHONUNBUFFERED", "1")
            // Its own process group: a terminal's Ctrl-C reaches ahe, which ends the trials.
            .process_group(0)
            .spawn()?;
        let pid = child.id();
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let (dead_tx, dead) = watch::channel(None);
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            // Dropping stdin: end of input, the bridge stops its environments and exits.
        });
        let answers = pending.clone();
        let log_path = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    tracing::warn!("harbor bridge: not a protocol line: {line}");
                    continue;
                };
                let id = v.get("id").and_then(Value::as_u64);
                if let Some(tx) = id.and_then(|id| answers.lock().unwrap().remove(&id)) {
                    let _ = tx.send(v);
                }
            }
            let status = child.wait().await;
            let tail = log_tail(&log_path);
            let why = format!(
                "the Harbor bridge (pid {}) exited ({}){}",
                pid.unwrap_or(0),
                status.map_or_else(|e| e.to_string(), |s| s.to_string()),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            ) + &format!(" (its log: {})", log_path.display());
            let _ = dead_tx.send(Some(why));
            // Every request still waiting fails (its sender is dropped).
            answers.lock().unwrap().clear();
        });
        Ok(Arc::new(Bridge {
            tx: Mutex::new(Some(tx)),
            pending,
            next: AtomicU64::new(1),
            dead,
            pid,
        }))
    }

    /// The bridge's process id.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Why the bridge died, once it has.
    pub(crate) fn dead(&self) -> Option<String> {
        self.dead.borrow().clone()
    }

    /// Resolves with the reason once the bridge has died.
    pub(crate) async fn wait_dead(&self) -> String {
        let mut rx = self.dead.clone();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return self
                    .dead()
                    .unwrap_or_else(|| "the Harbor bridge is gone".into());
            }
        }
    }

    /// Sends `req` (an object; its `id` is set here) and waits for the answer. Dropping the
    /// future before the answer cancels the request in the bridge.
    pub(crate) async fn call(&self, mut req: Value) -> Result<Value, Refusal> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        req["id"] = json!(id);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let lost = |b: &Bridge| Refusal {
            kind: "lost".into(),
            message: b
                .dead()
                .unwrap_or_else(|| "the Harbor bridge is gone".into()),
        };
        if self.dead().is_some() || !self.send(format!("{req}\n")) {
            self.pending.lock().unwrap().remove(&id);
            return Err(lost(self));
        }
        let mut guard = CancelGuard {
            bridge: self,
            id,
            armed: true,
        };
        let answer = rx.await;
        guard.armed = false;
        let v = match answer {
            Ok(v) => v,
            Err(_) => {
                // Answers are dropped only when the bridge died; wait for its reason.
                let why = tokio::time::timeout(std::time::Duration::from_secs(5), self.wait_dead())
                    .await
                    .unwrap_or_else(|_| "the Harbor bridge stopped answering".into());
                return Err(Refusal {
                    kind: "lost".into(),
                    message: why,
                });
            }
        };
        if v.get("ok").and_then(Value::as_bool) == Some(true) {
            return Ok(v);
        }
        Err(Refusal {
            kind: v["kind"].as_str().unwrap_or("backend").to_string(),
            message: v["error"].as_str().unwrap_or("no message").to_string(),
        })
    }

    /// Sends `req` without waiting for its answer (it is dropped when it comes).
    pub(crate) fn notify(&self, mut req: Value) {
        req["id"] = json!(self.next.fetch_add(1, Ordering::Relaxed));
        self.send(format!("{req}\n"));
    }

    /// Queues one line for the bridge's input; false once it is closed or the bridge died.
    fn send(&self, line: String) -> bool {
        self.tx
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|tx| tx.send(line).is_ok())
    }

    /// Closes the bridge's input: it stops every environment it started, then exits.
    pub(crate) fn close(&self) {
        self.tx.lock().unwrap().take();
    }
}

/// Cancels a request in the bridge when its caller stops waiting.
struct CancelGuard<'a> {
    bridge: &'a Bridge,
    id: u64,
    armed: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.bridge.pending.lock().unwrap().remove(&self.id);
            self.bridge
                .send(format!("{}\n", json!({"op": "cancel", "target": self.id})));
        }
    }
}

/// The last meaningful lines of the bridge's log (an exception and its message), short.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("DEBUG"))
        .collect();
    let tail = lines[lines.len().saturating_sub(2)..].join(" | ");
    tail.chars().take(400).collect()
}

/// Runs a bridge for one `hello` and one `check` of `cfg`'s environment (blocking; before
/// any runtime is needed); their answers.
pub(super) fn hello(
    python: &Path,
    script: &Path,
    cfg: &super::HarborConfig,
) -> anyhow::Result<(Value, Value)> {
    use std::io::{BufRead, Read, Seek, Write};
    let mut err = tempfile::tempfile()?;
    let mut child = std::process::Command::new(python)
        .arg(script)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(err.try_clone()?))
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", python.display()))?;
    let mut stdin = child.stdin.take();
    if let Some(stdin) = stdin.as_mut() {
        let check = json!({"id": 1, "op": "check", "environment": cfg.environment,
                           "options": cfg.options});
        let _ = stdin.write_all(format!("{{\"id\": 0, \"op\": \"hello\"}}\n{check}\n").as_bytes());
        let _ = stdin.flush();
    }
    // Both answers before the input closes (a closing input cancels what is in flight).
    let mut answers: Vec<Value> = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                answers.push(v);
            }
            if answers.len() == 2 {
                break;
            }
        }
    }
    drop(stdin);
    let status = child.wait()?;
    let by_id = |id: u64| answers.iter().find(|v| v["id"] == json!(id)).cloned();
    let check = by_id(1).unwrap_or_else(|| json!({"ok": false, "error": "no answer"}));
    let v: Value = by_id(0)
        .filter(|v: &Value| v["ok"] == json!(true))
        .ok_or_else(|| {
            let mut text = String::new();
            let _ = err.rewind().and_then(|_| err.read_to_string(&mut text));
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            anyhow::anyhow!(
                "the Harbor bridge did not answer hello with {} ({status}): {}",
                python.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )
        })?;
    Ok((v, check))
}
