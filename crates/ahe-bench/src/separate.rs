//! Harbor's separate verifier mode (`[verifier] environment_mode = "separate"`): the tests run
//! in a fresh sandbox of the task's image that receives only the task's artifacts from the
//! agent's sandbox. Nothing the agent changed elsewhere — interpreters, libraries, test-runner
//! configuration, processes left running — reaches the verifier.

use std::path::Path;

use ahe_sandbox::{Backend, LeftoverPolicy, Sandbox, SandboxSpec};

use crate::guard::Guard;
use crate::task::Task;
use crate::verify::{self, Verified, VerifierPolicy, VerifyError};

/// What a separate verifier receives: the task's declared artifacts, or — when the run forces
/// the mode on a task that declares none — its working directory; `/logs/artifacts` always.
pub fn artifacts(task: &Task, workdir: &str) -> Vec<String> {
    let mut a = if task.artifacts.is_empty() {
        vec![workdir.to_string()]
    } else {
        task.artifacts.clone()
    };
    a.push("/logs/artifacts".into());
    a.retain(|p| p.starts_with('/') && !p.split('/').any(|c| c == ".."));
    a.dedup();
    a
}

/// Ends the agent's processes, copies the artifacts into a fresh sandbox, and runs the
/// verifier there (its own change checks judge what the artifacts bring).
pub(crate) async fn verify(
    backend: &dyn Backend,
    policy: VerifierPolicy,
    task: &Task,
    agent_sb: &dyn Sandbox,
    spec: &SandboxSpec,
    dir: &Path,
    notes: &mut Vec<String>,
) -> Verified {
    let infra = |e: String| Verified {
        reward: Err(VerifyError::Infra(format!("separate verifier: {e}"))),
        handover: None,
        suspect: Vec::new(),
        handover_ms: 0,
        witness: None,
    };
    if let Err(e) = agent_sb.end_leftovers(LeftoverPolicy::Kill, 0).await {
        return infra(e.to_string());
    }
    let staging = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => return infra(e.to_string()),
    };
    let mut copied = Vec::new();
    for (i, a) in artifacts(task, agent_sb.workdir()).iter().enumerate() {
        let host = staging.path().join(i.to_string());
        // An artifact the agent did not make is simply absent (as in Harbor).
        if agent_sb.get(a, &host).await.is_ok() && host.exists() {
            copied.push((a.clone(), host));
        }
    }
    let mut vspec = spec.clone();
    vspec.trial_id = format!("{}-verifier", spec.trial_id);
    let fresh = match backend.create(&vspec).await {
        Ok(s) => s,
        Err(e) => return infra(e.to_string()),
    };
    let programs = verify::replaceable(task, fresh.as_ref());
    let before = verify::fingerprint(fresh.as_ref(), &programs).await;
    let mut guard = Guard::start(task, fresh.as_ref()).await.ok();
    let mut put_err = None;
    for (a, host) in &copied {
        if let Err(e) = fresh.put(host, a).await {
            put_err = Some(format!("copying artifact {a}: {e}"));
            break;
        }
    }
    notes.push(format!(
        "the verifier ran in a separate sandbox of the task's image with {} artifact(s): {}",
        copied.len(),
        copied
            .iter()
            .map(|(a, _)| a.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let v = match put_err {
        Some(e) => infra(e),
        None => {
            verify::verify(
                task,
                fresh.as_ref(),
                dir,
                &policy,
                &programs,
                &before,
                guard.as_mut(),
            )
            .await
        }
    };
    if let Some(g) = guard {
        notes.extend(g.notes);
    }
    if let Err(e) = fresh.destroy().await {
        tracing::warn!("separate verifier sandbox teardown failed: {e}");
    }
    v
}
