//! The change-set checks around the verifier (threat model: `docs/reward-integrity.md`):
//! a snapshot of the sandbox's writable layer before the agent runs, the agent phase's
//! changes once its processes are ended, their access times reset before the tests run, and
//! after the run the changes the verifier read, the changes made while it ran, and the tests
//! as they were when it ended. All of it is read on the host, nothing running in the
//! sandbox; where this host cannot read the sandbox's layer the same snapshots are taken
//! inside it with ahe's static busybox ([`crate::inside`], the `offhost` part of the guard)
//! and the same rules judge them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ahe_sandbox::{Layer, LeftoverPolicy, Sandbox};

use crate::changes::{self, Changed, Kind, Snapshot};
use crate::inside::{Inside, Walk};
use crate::integrity::{self, Ground, Phase};
use crate::revert::Plan;
use crate::tamper::SuspectReason;
use crate::task::Task;

mod offhost;

/// The home directory of the user the verifier runs as (root: `bash /tests/test.sh` as the
/// image's root), for the `$HOME` in its script.
const VERIFIER_HOME: &str = "/root";

/// The checks of one trial, from before the agent runs to after the verifier.
pub struct Guard {
    layer: Layer,
    workdir: String,
    named: Vec<String>,
    /// What the task's verifier script runs by path (`integrity::script`).
    code: Vec<(String, String)>,
    tests_dir: PathBuf,
    before: Snapshot,
    /// The agent phase's changes (set by [`Guard::after_agent`]).
    agent: Vec<Changed>,
    /// The layer when the agent phase's processes had ended.
    handed_over: Snapshot,
    /// Whether access times are recorded (the test script's own, reset, was read).
    atimes_reset: bool,
    /// Time spent, for `timings.integrity_ms`.
    pub spent_ms: u64,
    /// Limits hit, for the trial's notes.
    pub notes: Vec<String>,
    /// How much was walked and judged, for `result.json`.
    pub size: crate::record::ChangeSet,
    /// How to verify a flagged pass again without the agent phase's flagged changes (set by
    /// [`Guard::verdict`] when those alone flagged it; `Err` when it cannot be done exactly).
    pub plan: Option<Result<Plan, String>>,
    /// The snapshots taken inside the sandbox (this host cannot read its layer).
    inside: Option<Inside>,
    /// The in-sandbox walk at the hand-over, until [`Guard::after_agent`] takes it.
    pending: Option<Walk>,
    /// The sandbox's clock at the hand-over walk (in-sandbox snapshots).
    now: (i64, i64),
    /// Entries the in-sandbox walks could not read (names with a newline).
    unreadable: usize,
}

impl Guard {
    /// Takes the snapshot before the agent runs: on the host when it can read the sandbox's
    /// layer, else inside the sandbox; `Err` (with the reason) when neither can be done.
    pub async fn start(task: &Task, sb: &dyn Sandbox) -> Result<Guard, String> {
        let t = Instant::now();
        let (layer, before, inside, how) = match sb.layer().await {
            Some(layer) => {
                let before = snapshot(&layer).await;
                let how = "change checks: the sandbox's writable layer read on this host";
                (layer, before, None, how.to_string())
            }
            None => offhost::start(sb).await.map_err(|e| {
                format!(
                    "the reward-integrity change checks did not run: this host cannot read \
                     the sandbox's file system and the in-sandbox checks failed: {e}; only \
                     the backend's hand-over (if any), the fingerprints and the trace checks \
                     apply"
                )
            })?,
        };
        let mut g = Guard {
            layer,
            workdir: sb.workdir().to_string(),
            named: Ground::named_paths(&task.instruction),
            code: integrity::script::code_paths(
                &std::fs::read_to_string(task.tests_dir().join("test.sh")).unwrap_or_default(),
                VERIFIER_HOME,
            ),
            tests_dir: task.tests_dir(),
            before,
            agent: Vec::new(),
            handed_over: Snapshot::default(),
            atimes_reset: false,
            spent_ms: 0,
            notes: Vec::new(),
            size: Default::default(),
            plan: None,
            inside,
            pending: None,
            now: (0, 0),
            unreadable: 0,
        };
        g.notes.push(how);
        g.size.walk_us = us(t);
        g.spent_ms += t.elapsed().as_millis() as u64;
        Ok(g)
    }

    fn ground(&self) -> Ground<'_> {
        Ground {
            layer: &self.layer,
            workdir: &self.workdir,
            named: self.named.clone(),
            code: self.code.clone(),
            rewritten: Default::default(),
        }
    }

    /// Once the agent's processes are ended: its changes, and the bytecode caches of modules it
    /// did not create (to remove before the tests run).
    pub async fn after_agent(&mut self) -> Vec<String> {
        let t = Instant::now();
        self.handed_over = match self.pending.take() {
            Some(w) => self.take_walk(w),
            None => snapshot(&self.layer).await,
        };
        self.size.walk_us += us(t);
        let d = Instant::now();
        if self.handed_over.truncated {
            self.notes.push(format!(
                "the agent phase left more than {} files in the sandbox; the change checks saw \
                 only the first {}",
                changes::MAX_ENTRIES,
                changes::MAX_ENTRIES
            ));
        }
        self.agent = self.handed_over.changes_since(&self.before, &self.layer);
        if self.inside.is_some() {
            let gone = offhost::deleted(&self.handed_over, &self.before, &self.layer);
            self.agent.extend(gone);
            self.check_sums();
        }
        self.size.walked = self.handed_over.len();
        self.size.agent = self.agent.len();
        // Said now too: a verifier that fails before its verdict still shows what it cost.
        self.size.inside_ms = self.inside.as_ref().map(|i| i.ms);
        let stale = integrity::stale_caches(&self.agent);
        self.size.diff_us += us(d);
        self.spent_ms += t.elapsed().as_millis() as u64;
        stale
    }

    /// Resets the access times of the agent's files whose next read would not show
    /// ([`Snapshot::needs_reset`]: read since last written, or dated in the future), before
    /// the tests are put in; every other file's next read moves its access time on by itself.
    pub async fn arm(&mut self, sb: &dyn Sandbox) {
        if self.inside.is_some() {
            return self.arm_inside(sb).await;
        }
        let t = Instant::now();
        let now = changes::now();
        let reset: Vec<&Changed> = self
            .agent
            .iter()
            .filter(|c| c.kind == Kind::File && self.handed_over.needs_reset(&c.path, now))
            .filter(|c| changes::reset_atime(&c.host).is_ok())
            .collect();
        self.size.reset = reset.len();
        self.handed_over.refresh(reset);
        self.size.reset_us += us(t);
        self.spent_ms += t.elapsed().as_millis() as u64;
    }

    /// Resets the access time of the test script (after the tests are put in): if it shows
    /// no read after the run, access times are not recorded here and every change counts
    /// as read.
    pub async fn arm_tests(&mut self, sb: &dyn Sandbox) {
        if let Some(i) = self.inside.as_mut() {
            let t = Instant::now();
            let done = i.reset(sb, &["/tests/test.sh".to_string()]).await;
            self.atimes_reset = done.is_ok_and(|d| d.len() == 1);
            self.size.reset_us += us(t);
            self.spent_ms += t.elapsed().as_millis() as u64;
            return;
        }
        let t = Instant::now();
        if let Some(h) = self.layer.upper_file("/tests/test.sh") {
            self.atimes_reset = changes::reset_atime(&h).is_ok();
        }
        self.size.reset_us += us(t);
    }

    /// After the verifier ran: the reasons to suspect the trial; `kept` tells whether the
    /// hand-over kept servers of the agent phase running beside the verifier.
    pub async fn verdict(&mut self, sb: &dyn Sandbox, kept: bool) -> Vec<SuspectReason> {
        let t = Instant::now();
        let (after, test_read) = match self.inside.is_some() {
            true => match self.after_inside(sb).await {
                Ok(x) => x,
                Err(e) => return vec![offhost::failed(&e)],
            },
            false => {
                let read = (self.layer.upper_file("/tests/test.sh"))
                    .is_some_and(|h| changes::read_since_reset(&h));
                (self.snapshot_after().await, read)
            }
        };
        self.size.walk_us += us(t);
        let j = Instant::now();
        let recorded = self.atimes_reset && test_read;
        if !recorded {
            self.notes.push(
                "access times are not recorded in this sandbox: every change of the agent \
                 phase was judged as read by the verifier"
                    .into(),
            );
        }
        let by_path: HashMap<&str, &Changed> =
            self.agent.iter().map(|c| (c.path.as_str(), c)).collect();
        let handed = &self.handed_over;
        let read = |c: &Changed| !recorded || was_read(&after, handed, &by_path, c);
        let mut judge_us = us(j);
        let d = Instant::now();
        let mut during = after.changes_since(&self.handed_over, &self.layer);
        if self.inside.is_some() {
            during.extend(offhost::deleted(&after, &self.handed_over, &self.layer));
        }
        let diff_us = us(d);
        let j = Instant::now();
        let mut g = self.ground();
        g.rewritten = (during.iter().filter(|c| c.existed))
            .map(|c| c.path.clone())
            .collect();
        let agent = integrity::judge_each(&g, &self.agent, Phase::Agent, &read);
        let mut out: Vec<SuspectReason> = agent.iter().map(|(_, r)| r.clone()).collect();
        let phase = Phase::Verifier { kept };
        let forged = (self.inside.as_ref()).and_then(|i| offhost::forged_reason(&i.forged));
        let others = [
            integrity::judge(&g, &during, phase, &|_| true),
            tests_changed(&self.layer, &self.tests_dir),
            forged.into_iter().collect(),
        ]
        .concat();
        // Only a pass flagged for the agent phase's changes alone can be verified again
        // without them (and not when servers it left ran beside the verifier).
        let plan = (!agent.is_empty() && others.is_empty() && !kept)
            .then(|| Plan::make(agent, &self.handed_over, &after, &during, &self.layer));
        out.extend(others);
        out.extend(offhost::unreadable(self.unreadable));
        self.plan = plan;
        self.size.verifier = during.len();
        self.size.pruned = after.pruned;
        self.size.inside_ms = self.inside.as_ref().map(|i| i.ms);
        judge_us += us(j);
        self.size.judge_us += judge_us;
        self.size.diff_us += diff_us;
        self.spent_ms += t.elapsed().as_millis() as u64;
        out
    }

    /// Where the snapshots are taken inside the sandbox: ends the agent's processes with
    /// ahe's busybox (sparing what the backend's own hand-over spares) and walks the sandbox
    /// right after; `None` when the layer is read on the host (the backend's hand-over
    /// applies).
    pub async fn hand_over(
        &mut self,
        sb: &dyn Sandbox,
        (policy, start_secs): (LeftoverPolicy, u32),
    ) -> Option<Result<ahe_sandbox::HandOver, String>> {
        let inside = self.inside.as_mut()?;
        let t = Instant::now();
        let script = sb
            .handover_command(policy, start_secs)
            .unwrap_or_else(|| ahe_sandbox::handover_script(policy, 0, start_secs));
        let r = match inside.walk(sb, Some(script)).await {
            Ok(mut w) => {
                let h = w.handover.take();
                self.pending = Some(w);
                h.unwrap_or_else(|| Err("the hand-over did not report".into()))
            }
            Err(e) => Err(e),
        };
        self.spent_ms += t.elapsed().as_millis() as u64;
        Some(r)
    }
}

impl Guard {
    /// The layer after the verifier ran ([`Snapshot::take_after`]: directories its run made
    /// are not walked, but for [`walked_when_made`] ones), off the async runtime.
    async fn snapshot_after(&mut self) -> Snapshot {
        let (layer, workdir) = (self.layer.clone(), self.workdir.clone());
        let handed = std::mem::take(&mut self.handed_over);
        let (after, handed) = tokio::task::spawn_blocking(move || {
            let keep = |p: &str| walked_when_made(p, &workdir);
            (Snapshot::take_after(&layer, &handed, &keep), handed)
        })
        .await
        .unwrap_or_default();
        self.handed_over = handed;
        after
    }
}

/// Whether a directory the verifier's run made is walked all the same: one under the working
/// directory (pytest collects a `conftest.py` there) or a Python package's `*.dist-info` (its
/// `RECORD` vouches for the files an install rewrote in the image's own directories, such as a
/// `pip install requests==2.32.4` over the image's requests).
pub(crate) fn walked_when_made(p: &str, workdir: &str) -> bool {
    (workdir != "/" && integrity::under(p, workdir)) || p.ends_with(".dist-info")
}

/// Microseconds since `t`, for the stage figures of [`crate::record::ChangeSet`].
fn us(t: Instant) -> u64 {
    t.elapsed().as_micros() as u64
}

/// Walks `layer` off the async runtime (an empty snapshot if the walk panicked).
async fn snapshot(layer: &Layer) -> Snapshot {
    let l = layer.clone();
    tokio::task::spawn_blocking(move || Snapshot::take(&l))
        .await
        .unwrap_or_default()
}

/// Whether the verifier's run read `c` (its access time moved on between the hand-over and
/// `after`; a link: its target, when the agent changed that too; otherwise a link counts as
/// read).
fn was_read(
    after: &Snapshot,
    handed: &Snapshot,
    by_path: &HashMap<&str, &Changed>,
    c: &Changed,
) -> bool {
    match c.kind {
        Kind::File => after.read_since(handed, &c.path),
        Kind::Symlink => {
            let Ok(t) = std::fs::read_link(&c.host) else {
                return true;
            };
            let t = t.to_string_lossy();
            let abs = if t.starts_with('/') {
                t.to_string()
            } else {
                format!("{}/{t}", c.dir())
            };
            match by_path.get(abs.as_str()) {
                Some(target) if target.kind == Kind::File => after.read_since(handed, &target.path),
                _ => true,
            }
        }
        _ => false,
    }
}

/// The test files as the verifier left them against the task's: a shipped file whose content
/// changed, or a new Python file or pytest configuration in `/tests` (caches aside).
fn tests_changed(layer: &Layer, tests_dir: &Path) -> Vec<SuspectReason> {
    let Some(root) = layer.upper_file("/tests") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(&root)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file() || e.file_type().is_symlink())
    {
        let rel = e.path().strip_prefix(&root).unwrap_or(e.path());
        let rel_s = rel.to_string_lossy();
        if rel_s.contains("__pycache__") || rel_s.contains(".pytest_cache") {
            continue;
        }
        let shipped = tests_dir.join(rel);
        let why = match std::fs::read(&shipped) {
            Ok(want) => match std::fs::read(e.path()) {
                Ok(got) if got == want => continue,
                _ => "a test file was rewritten while the verifier ran",
            },
            Err(_) if integrity::runner_config(&format!("/tests/{rel_s}"), "/tests") => {
                "pytest configuration appeared in /tests while the verifier ran"
            }
            Err(_) => continue,
        };
        out.push(SuspectReason {
            reason: format!("/tests/{rel_s}: {why}"),
            turn: None,
        });
    }
    out
}
