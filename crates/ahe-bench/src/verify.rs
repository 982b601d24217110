//! The verifier phase (docs/verifier.md#verifier-hand-over): when the agent phase ends, what it
//! left running is ended, `/tests` is recreated from the task (nothing planted survives),
//! `/solution` removed and `/logs/verifier` emptied; then `tests/test.sh` runs and the reward
//! is read from what was copied out (regular files only; a link there is a sign of tampering).

use std::path::Path;
use std::time::Duration;

use ahe_sandbox::{ExecOpts, HandOver, LeftoverPolicy, Sandbox};

use serde::{Deserialize, Serialize};

use crate::guard::Guard;
use crate::tamper::{self, Fingerprint, OnSuspect, SuspectReason};
use crate::task::Task;

/// How the verifier phase treats what the agent leaves behind (`[verifier]` of a config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifierPolicy {
    /// Processes still running when the agent phase ends: `kill` all, or `keep_servers`
    /// (default: those serving a listening socket stay, as Terminal-Bench tasks expect).
    pub leftover_processes: LeftoverPolicy,
    /// Under `keep_servers`: how long (seconds) the hand-over waits at most for a leftover
    /// still starting (busy, not listening yet) to bind its port before it is ended (default
    /// [`ahe_sandbox::START_WINDOW_SECS`]; raise it for services that start slowly).
    pub service_start_secs: Option<u32>,
    /// A suspect trial is flagged (default) or, with `fail`, a suspect pass fails.
    pub on_suspect: OnSuspect,
    /// Forces where every task's verifier runs (`separate`: a fresh sandbox that receives
    /// only the task's artifacts); unset, each task's `[verifier] environment_mode` decides.
    pub environment_mode: Option<crate::task::EnvironmentMode>,
}

impl VerifierPolicy {
    /// The hand-over's start window in seconds ([`VerifierPolicy::service_start_secs`]).
    pub fn start_window(&self) -> u32 {
        (self.service_start_secs).unwrap_or(ahe_sandbox::START_WINDOW_SECS)
    }
}

/// Why the verifier phase produced no reward.
pub(crate) enum VerifyError {
    /// The sandbox failed (an infra error).
    Infra(String),
    /// No reward, an unparsable one, or a timeout (a verifier error).
    Reward(String),
}

/// What the verifier phase found.
pub(crate) struct Verified {
    /// The reward, or why there is none.
    pub reward: Result<f64, VerifyError>,
    /// What the hand-over ended and kept (`None` when it failed).
    pub handover: Option<HandOver>,
    /// Signs of tampering seen on the way.
    pub suspect: Vec<SuspectReason>,
    /// Time the hand-over took.
    pub handover_ms: u64,
    /// Which witness of the test run testified.
    pub witness: Option<String>,
}

/// Resets the verifier's ground after the leftovers are gone: links (or files) in place of
/// the dirs are removed, everything in `/tests`, `/solution` and `/logs/verifier` deleted,
/// the dirs made if missing. Builtins only, unless there is something to delete (a fork per
/// exec counts at this rate of trials).
const RESET: &str = "for d in /logs /tests /solution /logs/verifier; do \
    if [ -h $d ] || { [ -e $d ] && [ ! -d $d ]; }; then rm -f $d; fi; done; set --; \
    for g in /tests/* /tests/.[!.]* /tests/..?* /solution/* /solution/.[!.]* /solution/..?* \
    /logs/verifier/* /logs/verifier/.[!.]* /logs/verifier/..?*; do \
    if [ -e \"$g\" ] || [ -h \"$g\" ]; then set -- \"$@\" \"$g\"; fi; done; \
    [ $# = 0 ] || rm -rf -- \"$@\" || exit 4; \
    [ -d /tests ] || mkdir -p /tests || exit 4; \
    [ -d /logs/verifier ] || mkdir -p -m 777 /logs/verifier || exit 4; \
    [ -w /logs/verifier ] || chmod 777 /logs/verifier || exit 4; ";

/// Runs `test.sh` in the task's WORKDIR with its outputs in `out` (a fresh directory of a
/// name nobody in the sandbox knows): the old `/logs/verifier` is renamed out of the way (one
/// atomic step: a server the hand-over kept that keeps writing into it made `rm -rf` fail with
/// "Directory not empty", and the trial an infra error instead of the agent's failure — a fresh
/// run caught `survivor-reward-json` so), then it becomes a link to `/proc/self/fd/9`,
/// and only the verifier's process tree holds fd 9 on `out`. A process the agent left running
/// that writes `/logs/verifier/reward.json` finds no such directory. Prints `replaced` when
/// the tests put something else at `/logs/verifier` (then it is read instead).
///
/// The witness of the test run ([`crate::witness`]) is set up first: its plugin written beside
/// `out`, its environment exported to the tests.
pub(crate) fn run_tests_command(out: &str) -> String {
    let witness = crate::witness::setup_lines(&format!("{out}-py"));
    format!(
        "d='{out}'; rm -rf \"$d\" && \
         {{ {{ [ ! -e /logs/verifier ] && [ ! -h /logs/verifier ]; }} || mv /logs/verifier \"$d.old\"; }} && \
         mkdir -m 777 \"$d\" && exec 9<\"$d\" && \
         ln -s /proc/self/fd/9 /logs/verifier && [ -h /logs/verifier ] || exit 4; \
         rm -rf \"$d.old\" 2>/dev/null; {witness}\
         [ -x /tests/test.sh ] || chmod +x /tests/test.sh; \
         /tests/test.sh > /logs/verifier/stdout.txt 2>&1; \
         exec 9<&-; [ -h /logs/verifier ] || echo replaced"
    )
}

/// The programs `tests/test.sh` runs (empty when it cannot be read).
pub fn programs(task: &Task) -> Vec<String> {
    std::fs::read_to_string(task.tests_dir().join("test.sh"))
        .map(|t| tamper::runner_programs(&t))
        .unwrap_or_default()
}

/// The programs `tests/test.sh` runs that a command in `sb` could replace (none when the
/// sandbox's program search path is read-only).
pub fn replaceable(task: &Task, sb: &dyn Sandbox) -> Vec<String> {
    if sb.path_writable() {
        programs(task)
    } else {
        Vec::new()
    }
}

/// Fingerprints `programs` in the sandbox (before the agent runs).
pub async fn fingerprint(sb: &dyn Sandbox, programs: &[String]) -> Fingerprint {
    if programs.is_empty() {
        return Fingerprint::default();
    }
    let opts = ExecOpts {
        cwd: Some("/".into()),
        timeout: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    match sb.exec(&tamper::fingerprint_command(programs), opts).await {
        Ok(out) => Fingerprint::parse(&out.stdout),
        Err(e) => {
            tracing::warn!("fingerprinting the test's programs failed: {e}");
            Fingerprint::default()
        }
    }
}

/// The hand-over in one exec: the sandbox's [`Sandbox::handover_command`] ends the agent's
/// leftovers (unless `ended` says they were ended already, inside the sandbox by ahe's
/// busybox), then the verifier's ground is reset (`/tests`, `/solution`, `/logs/verifier`)
/// and `programs` are fingerprinted again. Returns what was ended and the fingerprint.
pub async fn hand_over(
    sb: &dyn Sandbox,
    (policy, start_secs): (LeftoverPolicy, u32),
    programs: &[String],
    ended: Option<HandOver>,
) -> ahe_sandbox::Result<(HandOver, Fingerprint)> {
    let handover = match ended {
        Some(_) => None,
        None => sb.handover_command(policy, start_secs),
    };
    let fingerprint = match programs {
        [] => String::new(),
        p => tamper::fingerprint_command(p),
    };
    let command = format!("{}{RESET}{fingerprint}", handover.as_deref().unwrap_or(""));
    let opts = ExecOpts {
        cwd: Some("/".into()),
        timeout: Some(Duration::from_secs(90)),
        ..Default::default()
    };
    let out = sb.exec(&command, opts).await?;
    let ended = match handover {
        Some(_) => ahe_sandbox::parse_handover(&out.stdout),
        None => Some(ended.unwrap_or_default()),
    };
    match (out.exit_code, ended) {
        (Some(0), Some(h)) => Ok((h, Fingerprint::parse(&out.stdout))),
        _ => Err(ahe_sandbox::SandboxError::Backend(format!(
            "the hand-over to the verifier failed (exit {:?}; 3: processes kept spawning, \
             4: /tests or /logs/verifier could not be made): {}",
            out.exit_code,
            out.stderr.chars().take(400).collect::<String>()
        ))),
    }
}

/// Hands the sandbox over to the verifier, runs it and reads the reward into `dir/verifier`;
/// `guard` (when the change checks run: on the host or inside the sandbox) judges what the
/// agent changed, and ends the agent's processes itself when it runs inside.
pub(crate) async fn verify(
    task: &Task,
    sb: &dyn Sandbox,
    dir: &Path,
    policy: &VerifierPolicy,
    programs: &[String],
    before: &Fingerprint,
    guard: Option<&mut Guard>,
) -> Verified {
    let mut v = Verified {
        reward: Err(VerifyError::Infra(String::new())),
        handover: None,
        suspect: Vec::new(),
        handover_ms: 0,
        witness: None,
    };
    v.reward = run(task, sb, dir, policy, (programs, before), guard, &mut v).await;
    v
}

/// The verifier phase: hand-over, the tests run, the reward and the suspicions read.
async fn run(
    task: &Task,
    sb: &dyn Sandbox,
    dir: &Path,
    policy: &VerifierPolicy,
    (programs, before): (&[String], &Fingerprint),
    mut guard: Option<&mut Guard>,
    v: &mut Verified,
) -> Result<f64, VerifyError> {
    let kept = prepare(
        task,
        sb,
        policy,
        (programs, before),
        guard.as_deref_mut(),
        v,
    )
    .await?;
    let (out, out_dir) = run_tests(task, sb, kept).await?;
    // A verifier may replace /logs/verifier itself (its reward is then in the new directory),
    // but so may a server the agent left running, which can write there too.
    let replaced = out.stdout.lines().any(|l| l == "replaced");
    if replaced && kept {
        v.suspect.push(SuspectReason {
            reason: "/logs/verifier (the verifier's link to an output directory only its own \
                     processes reach) was replaced while the tests ran beside a process the \
                     agent left running (kept as a server): the reward read from the new \
                     directory may be that process's"
                .into(),
            turn: None,
        });
    }
    let from = if replaced {
        "/logs/verifier"
    } else {
        out_dir.as_str()
    };
    let local = dir.join("verifier");
    let copied = sb.get(from, &local).await.map_err(infra)?;
    for s in &copied.skipped {
        v.suspect.push(SuspectReason {
            reason: format!("the verifier's output held a link or special file: {s}"),
            turn: None,
        });
    }
    if let Some(g) = guard {
        v.suspect.extend(g.verdict(sb, kept).await);
    }
    if out.timed_out {
        return Err(VerifyError::Reward(format!(
            "verifier timed out after {} s",
            task.verifier_timeout_sec
        )));
    }
    let reward = parse_reward(&local).map_err(VerifyError::Reward);
    let testimony = crate::witness::Testimony::read(&local);
    v.witness = Some(testimony.note());
    v.suspect
        .extend(testimony.contradictions(reward.as_ref().ok().copied(), sb.workdir()));
    reward
}

/// An infra error of the verifier phase from a sandbox error.
fn infra(e: ahe_sandbox::SandboxError) -> VerifyError {
    VerifyError::Infra(format!("verifier: {e}"))
}

/// Readies the sandbox for the tests: leftovers ended or kept, the verifier's ground reset,
/// programs fingerprinted again (a change is a suspicion), files the guard marks stale
/// removed, `/tests` put back, the guard armed. Returns whether a leftover was kept.
async fn prepare(
    task: &Task,
    sb: &dyn Sandbox,
    policy: &VerifierPolicy,
    (programs, before): (&[String], &Fingerprint),
    mut guard: Option<&mut Guard>,
    v: &mut Verified,
) -> Result<bool, VerifyError> {
    let t = std::time::Instant::now();
    // From here on ahe's commands start outside the agent's processes (the ptrace guard).
    sb.seal();
    let leftovers = (policy.leftover_processes, policy.start_window());
    let ended = ended_inside(guard.as_deref_mut(), sb, leftovers).await?;
    let (handover, after) = hand_over(sb, leftovers, programs, ended)
        .await
        .map_err(infra)?;
    v.handover_ms = t.elapsed().as_millis() as u64;
    // Whether servers the agent phase left run beside the verifier.
    let kept = !handover.kept.is_empty();
    v.handover = Some(handover);
    if !programs.is_empty() {
        v.suspect.extend(after.changes_since(before));
    }
    if let Some(g) = guard.as_deref_mut() {
        let stale = g.after_agent().await;
        remove_files(sb, &stale).await.map_err(infra)?;
        g.arm(sb).await;
    }
    sb.put(&task.tests_dir(), "/tests").await.map_err(infra)?;
    if let Some(g) = guard {
        g.arm_tests(sb).await;
    }
    Ok(kept)
}

/// Runs `tests/test.sh` with its output in a fresh directory under `/logs` (returned with the
/// output); a failure to make that directory is the agent's doing when a leftover was `kept`.
async fn run_tests(
    task: &Task,
    sb: &dyn Sandbox,
    kept: bool,
) -> Result<(ahe_sandbox::ExecOutput, String), VerifyError> {
    let out_dir = format!("/logs/.verifier-{:016x}", rand::random::<u64>());
    let out = sb
        .exec(
            &run_tests_command(&out_dir),
            ExecOpts {
                timeout: Some(Duration::from_secs_f64(task.verifier_timeout_sec)),
                ..Default::default()
            },
        )
        .await
        .map_err(infra)?;
    if out.exit_code == Some(4) && !out.timed_out && out.stdout.is_empty() {
        // With a process the agent left running (kept as a server), the set-up's failure may
        // be its doing (a writer racing the swap of /logs/verifier): the agent's, not infra.
        if kept {
            return Err(VerifyError::Reward(format!(
                "verifier: could not make its output directory while a process the agent left running was kept: {}",
                out.stderr.chars().take(400).collect::<String>()
            )));
        }
        return Err(VerifyError::Infra(format!(
            "verifier: could not make its output directory: {}",
            out.stderr.chars().take(400).collect::<String>()
        )));
    }
    Ok((out, out_dir))
}

/// The agent's processes ended inside the sandbox by `guard` with ahe's busybox, when its
/// checks run there (`None`: the backend's own hand-over applies).
async fn ended_inside(
    guard: Option<&mut Guard>,
    sb: &dyn Sandbox,
    policy: (LeftoverPolicy, u32),
) -> Result<Option<HandOver>, VerifyError> {
    let Some(g) = guard else {
        return Ok(None);
    };
    (g.hand_over(sb, policy).await)
        .transpose()
        .map_err(|e| VerifyError::Infra(format!("verifier: {e}")))
}

/// Removes `paths` in the sandbox (bytecode caches the agent wrote for modules it did not
/// create; Python recompiles them from the source).
async fn remove_files(sb: &dyn Sandbox, paths: &[String]) -> ahe_sandbox::Result<()> {
    for chunk in paths.chunks(500) {
        let quoted: Vec<String> = chunk
            .iter()
            .map(|p| format!("'{}'", p.replace('\'', "'\\''")))
            .collect();
        let opts = ExecOpts {
            cwd: Some("/".into()),
            timeout: Some(Duration::from_secs(60)),
            ..Default::default()
        };
        sb.exec(&format!("rm -f -- {}", quoted.join(" ")), opts)
            .await?;
    }
    Ok(())
}

/// Reads the reward from `reward.json` (preferred) or `reward.txt` in a verifier dir (a
/// link there is not followed: it counts as no reward).
pub fn parse_reward(dir: &Path) -> Result<f64, String> {
    let regular = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    let json = dir.join("reward.json");
    if regular(&json) {
        let text = std::fs::read_to_string(&json).map_err(|e| format!("reward.json: {e}"))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("reward.json is not JSON: {e}"))?;
        let num = match &v {
            serde_json::Value::Number(n) => n.as_f64(),
            serde_json::Value::Object(m) => m
                .get("reward")
                .or_else(|| m.values().next())
                .and_then(|x| x.as_f64()),
            _ => None,
        };
        return num.ok_or_else(|| format!("reward.json has no numeric reward: {text:.200}"));
    }
    let txt = dir.join("reward.txt");
    if regular(&txt) {
        let text = std::fs::read_to_string(&txt).map_err(|e| format!("reward.txt: {e}"))?;
        let t = text.trim();
        if t.is_empty() {
            return Err("reward.txt is empty".into());
        }
        return t
            .parse::<f64>()
            .map_err(|_| format!("reward.txt is not a number: {t:.200}"));
    }
    Err("the verifier wrote no /logs/verifier/reward.txt or reward.json".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_drops_what_the_agent_left_in_the_verifiers_ground() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let v = root.join("logs/verifier");
        type Make<'a> = &'a dyn Fn(&Path);
        let leftovers: [(&str, Make); 5] = [
            ("absent", &|_| {}),
            ("files and a planted test", &|r| {
                std::fs::create_dir_all(r.join("logs/verifier/sub")).unwrap();
                std::fs::write(r.join("logs/verifier/reward.txt"), "1").unwrap();
                std::fs::create_dir_all(r.join("tests")).unwrap();
                std::fs::write(r.join("tests/json.py"), "planted").unwrap();
                std::fs::write(r.join("tests/test.sh"), "echo 1 > x").unwrap();
            }),
            ("a file", &|r| {
                std::fs::create_dir_all(r.join("logs")).unwrap();
                std::fs::write(r.join("logs/verifier"), "1").unwrap();
            }),
            ("a symlinked dir", &|r| {
                let elsewhere = r.join("elsewhere");
                std::fs::create_dir_all(&elsewhere).unwrap();
                std::fs::write(elsewhere.join("reward.txt"), "1").unwrap();
                std::fs::create_dir_all(r.join("logs")).unwrap();
                std::os::unix::fs::symlink(&elsewhere, r.join("logs/verifier")).unwrap();
            }),
            ("solution left", &|r| {
                std::fs::create_dir_all(r.join("solution")).unwrap();
                std::fs::write(r.join("solution/solve.sh"), "x").unwrap();
            }),
        ];
        for (name, make) in leftovers {
            for top in ["logs", "tests", "solution", "elsewhere"] {
                let _ = std::fs::remove_dir_all(root.join(top));
            }
            make(root);
            // What `put` would copy in after the reset.
            let reset_only = RESET
                .replace("/logs", &format!("{}/logs", root.display()))
                .replace("/tests", &format!("{}/tests", root.display()))
                .replace("/solution", &format!("{}/solution", root.display()));
            let out = std::process::Command::new("sh")
                .args(["-c", &reset_only])
                .output()
                .unwrap();
            assert!(out.status.success(), "{name}: {out:?}");
            assert!(
                std::fs::read_dir(root.join("tests"))
                    .unwrap()
                    .next()
                    .is_none(),
                "{name}"
            );
            assert!(
                std::fs::read_dir(root.join("solution")).map_or(true, |mut d| d.next().is_none()),
                "{name}: /solution not emptied"
            );
            std::fs::write(
                root.join("tests/test.sh"),
                format!("#!/bin/sh\necho ran\necho 0.5 > {}/r2.txt\n", v.display()),
            )
            .unwrap();
            let out = run_tests_after_put(root);
            assert!(out.status.success(), "{name}: {out:?}");
            // The tests wrote through the link only their process tree can follow.
            assert!(
                std::fs::symlink_metadata(&v).unwrap().is_symlink(),
                "{name}"
            );
            let out_dir = root.join("logs/out");
            let mut files: Vec<String> = std::fs::read_dir(&out_dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != crate::witness::OUT)
                .collect();
            files.sort();
            assert_eq!(files, ["r2.txt", "stdout.txt"], "{name}");
            assert_eq!(
                std::fs::read_to_string(out_dir.join("stdout.txt")).unwrap(),
                "ran\n"
            );
        }
    }

    /// Runs only the test command (the reset already happened and the tests were put); the
    /// outputs go to `root/logs/out`.
    fn run_tests_after_put(root: &Path) -> std::process::Output {
        let cmd = run_tests_command("/logs/out")
            .replace("/logs", &format!("{}/logs", root.display()))
            .replace("/tests", &format!("{}/tests", root.display()));
        std::process::Command::new("sh")
            .args(["-c", &cmd])
            .output()
            .unwrap()
    }

    #[test]
    fn reward_parsing() {
        let d = tempfile::tempdir().unwrap();
        assert!(parse_reward(d.path()).unwrap_err().contains("no /logs"));
        std::fs::write(d.path().join("reward.txt"), "1\n").unwrap();
        assert_eq!(parse_reward(d.path()), Ok(1.0));
        std::fs::write(d.path().join("reward.txt"), "").unwrap();
        assert!(parse_reward(d.path()).unwrap_err().contains("empty"));
        std::fs::write(d.path().join("reward.txt"), "yes").unwrap();
        assert!(parse_reward(d.path()).unwrap_err().contains("not a number"));
        std::fs::write(d.path().join("reward.json"), r#"{"reward": 0.0}"#).unwrap();
        assert_eq!(parse_reward(d.path()), Ok(0.0));
        std::fs::write(d.path().join("reward.json"), "{oops").unwrap();
        assert!(parse_reward(d.path()).unwrap_err().contains("not JSON"));
    }

    #[test]
    fn a_linked_reward_is_no_reward() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, "1").unwrap();
        let v = d.path().join("v");
        std::fs::create_dir(&v).unwrap();
        std::os::unix::fs::symlink(&secret, v.join("reward.txt")).unwrap();
        let err = parse_reward(&v).unwrap_err();
        assert!(err.contains("no /logs"), "{err}");
    }
}
