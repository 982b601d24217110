//! The ptrace guard (see `ptrace_guard`) on Harbor environments: the agent's commands start
//! without the guard's capabilities, ahe's (after the seal, and its own checks) with them.
//! With the Engine API the keeper is the agent's shell (started under `setpriv`); through
//! Harbor's own exec each agent command is wrapped in `setpriv` instead. Harbor's `docker`
//! environment gets the capability from ahe's compose overlay; a cloud environment's root
//! usually holds every capability, so the probe decides there.

use std::sync::atomic::Ordering;
use std::time::Instant;

use base64::Engine as _;
use serde_json::json;

use super::bridge::Bridge;
use super::engine::Engine;
use super::HarborSandbox;
use crate::{ptrace_guard, ExecOpts, ExecOutput, Result};

/// The guard's mask of a started environment, or why it is off: asked of the keeper with
/// the Engine API, else of one exec through Harbor (before the agent runs).
pub(super) async fn probe(
    engine: Option<&mut Engine>,
    bridge: &Bridge,
    session: &str,
) -> std::result::Result<u64, String> {
    if let Some(e) = engine {
        let mask = e.guard_mask().await;
        e.guarded = mask.is_ok();
        return mask;
    }
    let req = json!({
        "op": "exec",
        "session": session,
        "command": ptrace_guard::probe_script(),
        "cwd": "/",
        "timeout_sec": 60,
    });
    let answer = bridge.call(req).await.map_err(|r| r.message)?;
    ptrace_guard::mask_of(answer["output"].as_str().unwrap_or_default())
}

impl HarborSandbox {
    /// `bash -c command` through Harbor's environment object, as is (ahe's own commands).
    pub(super) async fn bridge_exec(&self, command: &str, opts: ExecOpts) -> Result<ExecOutput> {
        let t0 = Instant::now();
        let b64 = base64::engine::general_purpose::STANDARD;
        let a = self
            .call(json!({
                "op": "exec",
                "command": command,
                "cwd": opts.cwd,
                "env": opts.env,
                "timeout_sec": opts.timeout.map(|d| d.as_secs_f64()),
                "stdin_b64": opts.stdin.as_ref().map(|s| b64.encode(s)),
            }))
            .await?;
        Ok(ExecOutput {
            exit_code: a["exit_code"].as_i64().map(|c| c as i32),
            stdout: a["output"].as_str().unwrap_or_default().to_string(),
            stderr: String::new(),
            timed_out: a["timed_out"].as_bool().unwrap_or(false),
            duration_ms: t0.elapsed().as_millis() as u64,
        })
    }

    /// The agent's `command` as Harbor's exec runs it: under the image's `setpriv` while the
    /// guard is on and the sandbox is not sealed.
    pub(super) fn agent_command(&self, command: &str) -> String {
        match self.guard.is_ok() && !self.sealed.load(Ordering::SeqCst) {
            true => {
                let argv = ["bash", "-c", command].map(String::from);
                crate::exec_line(&ptrace_guard::setpriv(&argv))
            }
            false => command.to_string(),
        }
    }

    /// The trial's note on the guard.
    pub(super) fn guard_note(&self) -> String {
        match &self.guard {
            Ok(_) => format!(
                "ptrace guard: on (the agent's commands lack {} and CAP_SYS_PTRACE; the \
                 hand-over and the verifier hold {0})",
                ptrace_guard::CAP
            ),
            Err(why) => format!(
                "ptrace guard: off ({why}): a server kept for the tests could trace the verifier"
            ),
        }
    }
}
