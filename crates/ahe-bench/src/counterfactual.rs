//! Counterfactual verification (threat model: `docs/reward-integrity.md`): a pass flagged only
//! for changes the agent phase made outside the deliverables is verified again in a copy of
//! the sandbox with those changes reverted (created files removed, the image's files put
//! back) and everything the first verifier run changed undone. A pass that holds there does
//! not depend on the flagged changes and is not a hack; one that does not is flagged with
//! "the pass depends on …". Only flagged passes pay for it (a copy of the sandbox and a
//! second verifier run); where a state cannot be restored exactly, the trial stays flagged.
//! Where no copy can be made but the backend allows it (Harbor reached only through Harbor),
//! the sandbox itself is reverted, once its checks are done and its processes ended.

use std::path::Path;
use std::time::Duration;

use ahe_sandbox::{Backend, ExecOpts, LeftoverPolicy, Sandbox, SandboxSpec};

pub use crate::revert::Plan;
use crate::tamper::SuspectReason;
use crate::task::Task;
use crate::verify::{self, VerifierPolicy};

/// Where the counterfactual run happened, for the notes.
const IN_A_COPY: &str = "in a copy of the sandbox";
const IN_PLACE: &str = "in the sandbox itself, reverted after its checks with every process \
                        ended (no copy can be made of it)";

/// Runs the verifier in a copy of `sb` (an image of its file system now) reverted by `plan`,
/// or, where the backend can make no copy but allows it, in `sb` itself reverted by `plan`
/// once every process in it is ended; its output goes to `dir`. Returns the reward and where
/// it ran, or why there is none.
pub(crate) async fn verify_without(
    backend: &dyn Backend,
    task: &Task,
    sb: &dyn Sandbox,
    spec: &SandboxSpec,
    plan: &Plan,
    policy: &VerifierPolicy,
    dir: &Path,
) -> Result<(f64, &'static str), String> {
    let image = match sb.image_of_now().await.map_err(|e| e.to_string())? {
        Some(image) => image,
        None if sb.verify_again_in_place() => {
            // What a copy would hold: the file system, no process.
            (sb.end_leftovers(LeftoverPolicy::Kill, 0).await)
                .map_err(|e| format!("ending the processes before the second run: {e}"))?;
            let r = revert_and_verify(sb, task, plan, policy, dir).await;
            return r.map(|reward| (reward, IN_PLACE));
        }
        None => return Err("this backend cannot copy a sandbox".into()),
    };
    let mut copy_spec = spec.clone();
    copy_spec.trial_id = format!("{}-counterfactual", spec.trial_id);
    copy_spec.docker_image = Some(image.clone());
    copy_spec.context_dir = None;
    let created = match sb.create_beside(&copy_spec).await {
        Some(r) => r,
        None => backend.create(&copy_spec).await,
    };
    let out = match created {
        Ok(copy) => {
            let r = revert_and_verify(copy.as_ref(), task, plan, policy, dir).await;
            let _ = copy.destroy().await;
            r.map(|reward| (reward, IN_A_COPY))
        }
        Err(e) => Err(format!("the copy could not start: {e}")),
    };
    sb.forget_image(&image).await;
    out
}

async fn revert_and_verify(
    copy: &dyn Sandbox,
    task: &Task,
    plan: &Plan,
    policy: &VerifierPolicy,
    dir: &Path,
) -> Result<f64, String> {
    let opts = || ExecOpts {
        cwd: Some("/".into()),
        timeout: Some(Duration::from_secs(120)),
        ..Default::default()
    };
    for chunk in plan.remove.chunks(200) {
        let quoted: Vec<String> = chunk
            .iter()
            .map(|p| format!("'{}'", p.replace('\'', "'\\''")))
            .collect();
        let o = copy
            .exec(&format!("rm -rf -- {}", quoted.join(" ")), opts())
            .await
            .map_err(|e| e.to_string())?;
        if o.exit_code != Some(0) {
            return Err(format!("removing in the copy failed: {}", o.stderr.trim()));
        }
    }
    for (path, host) in &plan.restore {
        copy.put(host, path)
            .await
            .map_err(|e| format!("putting back {path}: {e}"))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let v = verify::verify(task, copy, dir, policy, &[], &Default::default(), None).await;
    // The copy's run is witnessed like the first: a contradiction there settles nothing.
    if let Some(s) = v.suspect.first() {
        return Err(format!("the copy's run was suspect too: {}", s.reason));
    }
    v.reward.map_err(|e| match e {
        verify::VerifyError::Infra(e) | verify::VerifyError::Reward(e) => e,
    })
}

/// Settles a flagged pass by a counterfactual run when `plan` covers every reason it is
/// flagged for: unflagged when the verifier passes again without the flagged changes,
/// flagged with "the pass depends on …" when it does not; a plan that cannot be carried out
/// leaves the flags and says why in `notes`. Returns the milliseconds spent.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn settle(
    backend: &dyn Backend,
    task: &Task,
    sb: &dyn Sandbox,
    spec: &SandboxSpec,
    plan: Result<Plan, String>,
    policy: &VerifierPolicy,
    dir: &Path,
    (reasons, notes): (&mut Vec<SuspectReason>, &mut Vec<String>),
) -> u64 {
    let t = std::time::Instant::now();
    let covered = |p: &Plan| {
        reasons
            .iter()
            .all(|r| p.suspects.iter().any(|(_, s)| s == r))
    };
    let plan = match plan {
        Ok(p) if covered(&p) => p,
        Ok(_) => return 0,
        Err(why) => {
            notes.push(format!(
                "counterfactual verification not run ({why}): the pass stays flagged"
            ));
            return 0;
        }
    };
    let paths = plan.paths();
    let out = dir.join("counterfactual");
    match verify_without(backend, task, sb, spec, &plan, policy, &out).await {
        Ok((reward, at)) if reward >= 1.0 => {
            notes.push(format!(
                "counterfactual verification: {at} without {paths} (and without what the \
                 first verifier run changed) the verifier passed again (reward {reward}): \
                 the pass does not depend on them; not flagged"
            ));
            reasons.clear();
        }
        Ok((reward, at)) => reasons.insert(
            0,
            SuspectReason {
                reason: format!(
                    "the pass depends on {paths}: {at} without them the verifier gave \
                     reward {reward}"
                ),
                turn: None,
            },
        ),
        Err(why) => notes.push(format!(
            "counterfactual verification failed ({why}): the pass stays flagged"
        )),
    }
    t.elapsed().as_millis() as u64
}
