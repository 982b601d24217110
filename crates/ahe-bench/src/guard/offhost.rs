//! The guard's steps where the sandbox's layer cannot be read from this host: the same
//! snapshots taken inside the sandbox with ahe's static busybox ([`crate::inside`]), the
//! changed files the rules read copied out to a host directory, and the same rules over them.

use std::collections::HashSet;
use std::time::Duration;

use ahe_sandbox::{ExecOpts, Layer, LeftoverPolicy, Sandbox};

use super::Guard;
use crate::changes::{Changed, Kind, Snapshot};
use crate::inside::{Inside, Walk};
use crate::tamper::SuspectReason;

/// The loader's cache, whose image copy the rules compare a changed one with.
const LOADER_CACHE: &str = "/etc/ld.so.cache";

/// The baseline walk before the agent runs: the layer the rules will read, the snapshot, the
/// walker and the note saying how the checks run.
pub(super) async fn start(
    sb: &dyn Sandbox,
) -> Result<(Layer, Snapshot, Option<Inside>, String), String> {
    let mut inside = Inside::new()?;
    let mut w = inside.walk(sb, None).await?;
    inside.base_sums = w.sums.take();
    // Nothing of the agent ran yet: the sandbox's own shell tells its PATH truthfully.
    let opts = ExecOpts {
        cwd: Some("/".into()),
        timeout: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    let path_env = match sb.exec("printf %s \"$PATH\"", opts).await {
        Ok(o) if o.exit_code == Some(0) && o.stdout.starts_with('/') => o.stdout,
        _ => ahe_sandbox::dockerfile::DEFAULT_PATH.to_string(),
    };
    if w.snapshot.kind(LOADER_CACHE) == Some(Kind::File) {
        inside.copy_image_file(sb, LOADER_CACHE).await;
    }
    let layer = inside.layer(&w.snapshot, path_env);
    let how = format!(
        "change checks and hand-over: inside the sandbox with ahe's static busybox (this \
         host cannot read its file system), {}; {}",
        if sb.exec_direct() && inside.from_volume() {
            "started directly from a read-only volume mounted when the sandbox was made (no \
             program of the sandbox runs before it, none can swap it)"
        } else if sb.exec_direct() {
            "started directly (no program of the sandbox runs before it)"
        } else {
            "started through the sandbox's own shell (which an agent could have replaced)"
        },
        sums_note(&inside, w.caps)
    );
    Ok((layer, w.snapshot, Some(inside), how))
}

/// What the notes say about content hashes: taken or not, and why.
fn sums_note(inside: &Inside, caps: Option<u64>) -> String {
    let forge = caps.map(|c| c & crate::inside::FORGE_CAPS != 0);
    match (&inside.base_sums, forge) {
        (Some(s), Some(true)) => format!(
            "content hashes of its {} files taken before the agent and at the hand-over \
             (its processes may set the clock or write the disk raw: an edit could keep a \
             file's times)",
            s.len()
        ),
        (Some(s), _) => format!("content hashes of its {} files taken (asked for)", s.len()),
        (None, Some(false)) => "no content hashes: no process in it may set the clock or \
                                write the disk raw (CAP_SYS_TIME, CAP_SYS_RAWIO), so no edit \
                                keeps a file's ctime"
            .into(),
        (None, _) => "no content hashes (not asked for, or its capabilities unread)".into(),
    }
}

/// The reason a trial is suspect when files changed with their times kept.
pub(super) fn forged_reason(paths: &[String]) -> Option<SuspectReason> {
    let first = paths.first()?;
    Some(SuspectReason {
        reason: format!(
            "{first}{}: content changed during the agent phase while its inode, size, mtime and \
             ctime stayed as before the agent ran — its times were forged (the clock set back) \
             to hide the edit from the change checks",
            match paths.len() {
                1 => String::new(),
                n => format!(" and {} more", n - 1),
            }
        ),
        turn: None,
    })
}

/// Files and links of `earlier` gone in `now`, as deletions (what overlay whiteouts show on
/// the host).
pub(super) fn deleted(now: &Snapshot, earlier: &Snapshot, layer: &Layer) -> Vec<Changed> {
    now.gone_since(earlier)
        .into_iter()
        .map(|p| Changed {
            host: layer.upper_file(&p).unwrap_or_default(),
            path: p,
            kind: Kind::Deleted,
            existed: true,
            mode: 0,
        })
        .collect()
}

/// The reason a trial is suspect when the in-sandbox checks failed after the agent ran.
pub(super) fn failed(e: &str) -> SuspectReason {
    SuspectReason {
        reason: format!("the in-sandbox change checks failed after the agent phase: {e}"),
        turn: None,
    }
}

/// The reason for entries the walks could not read (a name with a newline hides a path from
/// them).
pub(super) fn unreadable(n: usize) -> Option<SuspectReason> {
    (n > 0).then(|| SuspectReason {
        reason: format!(
            "{n} entries of the sandbox could not be read by the in-sandbox walk (a file name \
             with a newline): the change checks could not see them"
        ),
        turn: None,
    })
}

/// Whether the rules read `c`'s content whether or not the verifier read it: package
/// records (what installs are) and package markers (what a module belongs to).
fn always_needed(c: &Changed) -> bool {
    let (dir, name) = (c.dir(), c.name());
    (name == "RECORD" && dir.ends_with(".dist-info"))
        || (dir == "/var/lib/dpkg/info" && name.ends_with(".md5sums"))
        || name == "__init__.py"
        || c.path == LOADER_CACHE
}

impl Guard {
    /// Takes the walk made at the hand-over as the snapshot of the hand-over.
    pub(super) fn take_walk(&mut self, w: Walk) -> Snapshot {
        self.now = w.now;
        self.unreadable += w.unreadable;
        if let Some(i) = self.inside.as_mut() {
            i.handed_sums = w.sums;
        }
        w.snapshot
    }

    /// Compares the hand-over's content hashes with the baseline's (when both were taken),
    /// once the agent phase's change set is known.
    pub(super) fn check_sums(&mut self) {
        let changed: HashSet<&str> = self.agent.iter().map(|c| c.path.as_str()).collect();
        if let Some(i) = self.inside.as_mut() {
            if let (Some(base), Some(now)) = (&i.base_sums, &i.handed_sums) {
                i.forged = crate::inside::forged(base, now, &changed);
            }
        }
    }

    /// [`Guard::arm`] inside the sandbox: `touch -a` by busybox, then the new stamps.
    pub(super) async fn arm_inside(&mut self, sb: &dyn Sandbox) {
        let t = std::time::Instant::now();
        let now = self.now;
        let paths: Vec<String> = (self.agent.iter())
            .filter(|c| c.kind == Kind::File && self.handed_over.needs_reset(&c.path, now))
            .map(|c| c.path.clone())
            .collect();
        let Some(inside) = self.inside.as_mut() else {
            return;
        };
        match inside.reset(sb, &paths).await {
            Ok(done) => {
                self.size.reset = done.len();
                for (p, s) in done {
                    self.handed_over.insert_raw(p, s);
                }
            }
            Err(e) => self
                .notes
                .push(format!("resetting access times failed: {e}")),
        }
        self.spent_ms += t.elapsed().as_millis() as u64;
    }

    /// After the verifier: ends every process left (servers kept beside the verifier too),
    /// walks the sandbox, and copies out what the rules read. The walk (pruned as the host
    /// walk would be) and whether the test script was read.
    pub(super) async fn after_inside(
        &mut self,
        sb: &dyn Sandbox,
    ) -> Result<(Snapshot, bool), String> {
        let Some(inside) = self.inside.as_mut() else {
            return Err("no in-sandbox walker".into());
        };
        let script = sb
            .handover_command(LeftoverPolicy::Kill, 0)
            .unwrap_or_else(|| ahe_sandbox::handover_script(LeftoverPolicy::Kill, 0, 0));
        let mut w = inside.walk(sb, Some(script)).await?;
        if let Some(Err(e)) = w.handover.take() {
            return Err(e);
        }
        self.unreadable += w.unreadable;
        let test_read = w.test_atime.is_some_and(|a| a.0 > 1);
        let mut after = std::mem::take(&mut w.snapshot);
        let workdir = self.workdir.clone();
        let keep = |p: &str| super::walked_when_made(p, &workdir);
        after.prune_made(&self.handed_over, &self.layer, &keep);
        let during = after.changes_since(&self.handed_over, &self.layer);
        let recorded = self.atimes_reset && test_read;
        let needed = |c: &Changed| {
            !recorded || always_needed(c) || after.read_since(&self.handed_over, &c.path)
        };
        let (mut files, mut links) = (Vec::new(), Vec::new());
        for c in self.agent.iter().filter(|c| needed(c)).chain(&during) {
            match after.kind(&c.path) {
                Some(Kind::File) => files.push(c.path.clone()),
                Some(Kind::Symlink) => links.push(c.path.clone()),
                _ => {}
            }
        }
        // Every changed link (its target decides whether its target file was read).
        links.extend(
            (self.agent.iter())
                .filter(|c| after.kind(&c.path) == Some(Kind::Symlink))
                .map(|c| c.path.clone()),
        );
        for v in [&mut files, &mut links] {
            v.sort();
            v.dedup();
        }
        inside.copy_out(sb, &files, &links).await?;
        Ok((after, test_read))
    }
}
