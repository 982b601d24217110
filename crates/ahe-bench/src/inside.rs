//! The change checks' snapshots taken inside the sandbox, for a sandbox whose writable layer
//! this host cannot read (a remote engine, Harbor's cloud environments; threat model:
//! `docs/reward-integrity.md`, "Off-host sandboxes"). ahe puts its own statically linked
//! busybox into the sandbox (a fresh copy at a random path for each phase) and calls its
//! applets by that path with a cleared environment (`env -i`), so no preload, shadowed
//! program, patched interpreter or `PATH` the agent planted runs in their place: `sh` runs
//! the hand-over, `find` and `stat` list every entry (path, inode, size, times, mode),
//! `touch` resets access times and `tar` copies the changed files out to a host directory.
//! The rules then read that directory as they read a host layer ([`Layer`] with the image's
//! paths from the baseline walk). After each use the copy is fetched back and compared with
//! ahe's own: a copy altered while it ran fails the checks.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use ahe_sandbox::busybox::{busybox, is_static_elf, BUSYBOX_ENV};
use ahe_sandbox::{ExecOpts, HandOver, Layer, Sandbox, INSIDE_PREFIX};

use crate::changes::{Kind, RawStat, Snapshot, MAX_ENTRIES};

/// Files the container engine manages (bind-mounted from the host and rewritten by it, never
/// in a container's writable layer): not the agent's changes, and neither code nor test
/// configuration.
const ENGINE_FILES: &[&str] = &["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];

/// `stat -c` format: mode (hex), inode, size, then access, modification and change time
/// (each as epoch seconds and as a date with nanoseconds), the name last.
const FMT: &str = "%f|%i|%s|%X|%x|%Y|%y|%Z|%z|%n";

/// Lists every entry but the kernel's and the verifier's ground (`$1` busybox, `$2` this
/// phase's dir, `$3` an earlier phase's dir to remove first); with content hashes (`SUMS`),
/// those first: a file written after its hash shows in the walk's times, so no write racing
/// the walk looks like an edit with forged times.
const WALK: &str = r#"[ -n "$PREV" ] && "$BB" rm -rf "$PREV"
c=$("$BB" sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)
echo "CAPS|$c"
if [ "$SUMS" = always ] || { [ "$SUMS" = auto ] && [ $(( 0x${c:-0} & @FORGE@ )) -ne 0 ]; }; then
  "$BB" find / \( -path /proc -o -path /sys -o -path /dev -o -path /tests -o -path /solution -o -path /logs -o -path "$SELF" \) -prune -o -type f -exec "$BB" md5sum {} + >"$SELF/sums" 2>/dev/null
  echo "SUMS|1"
fi
"$BB" date +'NOW|%s'
"$BB" find / \( -path /proc -o -path /sys -o -path /dev -o -path /tests -o -path /solution -o -path /logs -o -path "$SELF" \) -prune -o ! -path / -exec "$BB" stat -c "E|@FMT@" {} + >"$SELF/walk" 2>"$SELF/err"
echo "LOST|$("$BB" grep -c -e "can't execute" -e "too long" "$SELF/err")"
"$BB" stat -c "T|@FMT@" /tests/test.sh 2>/dev/null
exit 0
"#;

/// The capabilities that let a process keep a file's ctime across an edit (in a sandbox's
/// bounding set, content hashes are taken): `CAP_SYS_TIME` (set the clock back, edit, set it
/// forward) and `CAP_SYS_RAWIO` (write the disk under the file system).
pub const FORGE_CAPS: u64 = (1 << 25) | (1 << 17);

/// Environment variable that sets when the walks take content hashes: `auto` (the default:
/// where [`FORGE_CAPS`] are in the sandbox's bounding set), `always`, `never`.
pub const SUMS_ENV: &str = "AHE_INSIDE_SUMS";

/// Ends the agent's processes (`$HO`: the hand-over script, its external commands
/// busybox's) before the walk; `HO` is then unset, since every program the walk starts
/// would carry it in its environment (busybox `find`'s batches of `-exec … +` leave only
/// 2 KB for the environment: a larger one fails batches, and the walk loses their entries).
const HANDOVER: &str = r#""$BB" sh -c 'BB=$1; ls() { "$BB" ls "$@"; }; sleep() { "$BB" sleep "$@"; }; eval "$HO"' ahe "$BB"
echo "HANDOVER|$?"
unset HO
"#;

/// Copies the files named (NUL-separated) on stdin into `$SELF/out`, then prints the target
/// of each link named in the arguments.
const COPY: &str = r#""$BB" rm -f "$SELF/walk"
"$BB" mkdir -p "$SELF/out"
"$BB" cat >"$SELF/list"
"$BB" xargs -0 -r "$BB" sh -c 'B=$1; O=$2; shift 2; "$B" tar -c -f - -C / "$@" 2>/dev/null | "$B" tar -x -f - -C "$O"' sh "$BB" "$SELF/out" <"$SELF/list"
for p; do printf 'L|%s\n' "$("$BB" readlink -- "$p")"; done
"#;

/// Resets the access time of the files named (NUL-separated) on stdin, then stats them into
/// `$SELF/restat` (a file, fetched like the walk: an exec's output may arrive with its stderr
/// mixed in, Harbor's does, and a line split by it would leave a file's new ctime unread).
const RESET: &str = r#""$BB" cat >"$SELF/reset"
"$BB" xargs -0 -r "$BB" touch -a -c -h -d '1970-01-01 00:00:01' -- <"$SELF/reset"
"$BB" xargs -0 -r "$BB" stat -c "E|@FMT@" -- <"$SELF/reset" >"$SELF/restat"
"#;

/// What one walk inside the sandbox gave.
pub struct Walk {
    /// Every entry.
    pub snapshot: Snapshot,
    /// The sandbox's clock when it ran (seconds, nanoseconds).
    pub now: (i64, i64),
    /// `/tests/test.sh`'s access time, when it exists.
    pub test_atime: Option<(i64, i64)>,
    /// What the hand-over before it did (when it ran one).
    pub handover: Option<Result<HandOver, String>>,
    /// Lines that could not be read (a name with a newline): none in an honest sandbox.
    pub unreadable: usize,
    /// The capability bounding set of the sandbox's processes (`CapBnd`), when read.
    pub caps: Option<u64>,
    /// The MD5 of every regular file walked, by path, when taken (see [`SUMS_ENV`]).
    pub sums: Option<HashMap<String, String>>,
}

/// ahe's busybox in one sandbox and the host directories the rules read.
pub struct Inside {
    bb: Arc<Vec<u8>>,
    /// The sandbox dir of the current copy.
    staged: Option<String>,
    /// Host: `up/` holds the changed files copied out, `img/` the image files the rules read.
    mirror: tempfile::TempDir,
    /// Time spent on it, for `change_set.inside_ms`.
    pub ms: u64,
    /// Content hashes of the baseline walk, when taken.
    pub base_sums: Option<HashMap<String, String>>,
    /// Content hashes of the hand-over's walk, when taken.
    pub handed_sums: Option<HashMap<String, String>>,
    /// Files whose content the agent phase changed while their inode, size and times stayed.
    pub forged: Vec<String>,
    /// Walks made so far.
    walks: u32,
    /// When the baseline walk takes content hashes ([`SUMS_ENV`]'s values; from it by
    /// default).
    pub sums_mode: String,
    /// The busybox on the sandbox's read-only tools volume ([`Sandbox::tools_dir`]): used in
    /// place of a copy put in before each use.
    tools: Option<String>,
}

impl Inside {
    /// Loads ahe's busybox (see [`busybox`]) and makes the host directories.
    pub fn new() -> Result<Inside, String> {
        let path = busybox()?;
        let bb = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mirror = tempfile::Builder::new()
            .prefix("ahe-inside-")
            .tempdir()
            .map_err(|e| format!("a temp dir: {e}"))?;
        for d in ["up", "img"] {
            std::fs::create_dir_all(mirror.path().join(d)).map_err(|e| e.to_string())?;
        }
        Ok(Inside {
            bb: Arc::new(bb),
            staged: None,
            mirror,
            ms: 0,
            base_sums: None,
            handed_sums: None,
            forged: Vec::new(),
            walks: 0,
            sums_mode: std::env::var(SUMS_ENV).unwrap_or_else(|_| "auto".into()),
            tools: None,
        })
    }

    /// The layer the rules read: the copied-out changes above the image's paths of `base`.
    pub fn layer(&self, base: &Snapshot, path_env: String) -> Layer {
        let paths: BTreeSet<String> = base.paths().cloned().collect();
        Layer {
            upper: vec![("/".into(), self.mirror.path().join("up"))],
            lower: vec![self.mirror.path().join("img")],
            lower_tops: None,
            overlay: false,
            path_env,
            image_paths: Some(Arc::new(paths)),
        }
    }

    /// The host dir the image files the rules read are copied to.
    pub fn image_dir(&self) -> PathBuf {
        self.mirror.path().join("img")
    }

    /// Puts a fresh copy of busybox at a new random dir (removing none yet: the next script
    /// removes the old one); returns the dir and the old one.
    async fn stage(&mut self, sb: &dyn Sandbox) -> Result<(String, String), String> {
        // The backend read the volume back byte for byte when it made it (once per engine),
        // and containers mount it read-only: no per-trial check.
        if self.tools.is_none() {
            self.tools = sb.tools_dir().map(|d| format!("{d}/busybox"));
        }
        let dir = format!("{INSIDE_PREFIX}{:016x}", rand::random::<u64>());
        let host = tempfile::tempdir().map_err(|e| e.to_string())?;
        if self.tools.is_none() {
            let file = host.path().join("busybox");
            std::fs::write(&file, self.bb.as_slice()).map_err(|e| e.to_string())?;
            set_mode(&file, 0o755);
        }
        sb.put(host.path(), &dir)
            .await
            .map_err(|e| format!("putting busybox into the sandbox: {e}"))?;
        let prev = self.staged.replace(dir.clone()).unwrap_or_default();
        Ok((dir, prev))
    }

    /// Whether busybox runs from the sandbox's read-only tools volume.
    pub fn from_volume(&self) -> bool {
        self.tools.is_some()
    }

    /// Runs `script` with busybox's `sh` (environment cleared but for `BB`, `SELF`, `PREV`
    /// and `extra`), arguments `args`, stdin `stdin`.
    async fn run(
        &self,
        sb: &dyn Sandbox,
        (dir, prev): (&str, &str),
        script: &str,
        extra: &[(&str, &str)],
        (args, stdin): (&[String], Option<Vec<u8>>),
    ) -> Result<ahe_sandbox::ExecOutput, String> {
        let bb = self
            .tools
            .clone()
            .unwrap_or_else(|| format!("{dir}/busybox"));
        let mut argv: Vec<String> = vec![bb.clone(), "env".into(), "-i".into(), "TZ=UTC0".into()];
        argv.push(format!("BB={bb}"));
        argv.push(format!("SELF={dir}"));
        argv.push(format!("PREV={prev}"));
        argv.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
        let script = script
            .replace("@FMT@", FMT)
            .replace("@FORGE@", &format!("{FORGE_CAPS:#x}"));
        argv.extend([bb, "sh".into(), "-c".into(), script]);
        argv.push("ahe".into());
        argv.extend(args.iter().cloned());
        let opts = ExecOpts {
            cwd: Some("/".into()),
            stdin,
            timeout: Some(Duration::from_secs(300)),
            ..Default::default()
        };
        let out = sb
            .exec_argv(&argv, opts)
            .await
            .map_err(|e| format!("busybox in the sandbox: {e}"))?;
        if out.exit_code.is_none() {
            return Err(format!(
                "busybox in the sandbox did not finish (timed out: {})",
                out.timed_out
            ));
        }
        Ok(out)
    }

    /// Copies `dir/name` out to a host temp dir (as `d`).
    async fn fetch(
        &self,
        sb: &dyn Sandbox,
        dir: &str,
        name: &str,
    ) -> Result<tempfile::TempDir, String> {
        let host = tempfile::tempdir().map_err(|e| e.to_string())?;
        let to = host.path().join("d");
        sb.get(&format!("{dir}/{name}"), &to)
            .await
            .map_err(|e| format!("copying {name} out of the sandbox: {e}"))?;
        Ok(host)
    }

    /// Checks the busybox copy in `dir` is still ahe's own, byte for byte (a copy altered
    /// while it ran fails the checks).
    async fn check_copy(&self, sb: &dyn Sandbox, dir: &str) -> Result<(), String> {
        if self.tools.is_some() {
            return Ok(()); // read-only since the sandbox was made
        }
        let host = self.fetch(sb, dir, "busybox").await?;
        let copy = std::fs::read(host.path().join("d")).unwrap_or_default();
        if copy.as_slice() != self.bb.as_slice() {
            return Err(format!(
                "ahe's busybox copy in the sandbox ({dir}/busybox) was altered while it ran: \
                 nothing it reported can be trusted"
            ));
        }
        Ok(())
    }

    /// Walks the sandbox with a fresh busybox copy; first ends the agent's processes when
    /// `handover` (the hand-over script) is given.
    pub async fn walk(
        &mut self,
        sb: &dyn Sandbox,
        handover: Option<String>,
    ) -> Result<Walk, String> {
        let t = Instant::now();
        let staged = self.stage(sb).await?;
        let (dir, prev) = (staged.0.as_str(), staged.1.as_str());
        // Hashes in the baseline (as asked) and at the hand-over (when the baseline has them).
        let mode = match (self.walks, &self.base_sums) {
            (0, _) => self.sums_mode.clone(),
            (1, Some(_)) => "always".into(),
            _ => "never".into(),
        };
        self.walks += 1;
        let mut extra = vec![("SUMS", mode.as_str())];
        let script = match &handover {
            Some(h) => {
                extra.push(("HO", h.as_str()));
                format!("{HANDOVER}{WALK}")
            }
            None => WALK.to_string(),
        };
        let out = self
            .run(sb, (dir, prev), &script, &extra, (&[], None))
            .await?;
        let host = self.fetch(sb, dir, "walk").await?;
        let sums = match out.stdout.lines().any(|l| l == "SUMS|1") {
            true => Some(self.fetch(sb, dir, "sums").await?),
            false => None,
        };
        // Only the agent's leftovers could race the copy: checked after the hand-over's walk
        // (before the agent nothing of it runs; after the verifier the copy-out checks).
        if handover.is_some() {
            self.check_copy(sb, dir).await?;
        }
        let text = std::fs::read_to_string(host.path().join("d")).unwrap_or_default();
        let mut w = parse_walk(&out.stdout, &text);
        if let Some(h) = sums {
            let text = std::fs::read_to_string(h.path().join("d")).unwrap_or_default();
            w.sums = Some(parse_sums(&text));
        }
        if handover.is_some() {
            let ok = out.stdout.lines().any(|l| l == "HANDOVER|0");
            w.handover = Some(match ahe_sandbox::parse_handover(&out.stdout) {
                Some(h) if ok => Ok(h),
                _ => Err(format!(
                    "the hand-over (busybox) could not end the agent's processes: {}",
                    out.stdout.chars().take(400).collect::<String>()
                )),
            });
        }
        if w.snapshot.is_empty() {
            return Err("the walk inside the sandbox listed nothing".into());
        }
        let lost = out.stdout.lines().find_map(|l| l.strip_prefix("LOST|"));
        if let Some(n) = lost
            .and_then(|n| n.trim().parse::<u32>().ok())
            .filter(|n| *n > 0)
        {
            return Err(format!(
                "the walk inside the sandbox is incomplete: {n} of find's batches could not \
                 run stat (the entries of those batches were not listed)"
            ));
        }
        self.ms += t.elapsed().as_millis() as u64;
        Ok(w)
    }

    /// Resets the access time of `paths` (files) to one second after the epoch; their
    /// entries as they are after it.
    pub async fn reset(
        &mut self,
        sb: &dyn Sandbox,
        paths: &[String],
    ) -> Result<Vec<(String, RawStat)>, String> {
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        let t = Instant::now();
        let dir = self.staged.clone().ok_or("busybox is not in the sandbox")?;
        self.run(sb, (&dir, ""), RESET, &[], (&[], Some(nul_list(paths))))
            .await?;
        let host = self.fetch(sb, &dir, "restat").await?;
        let text = std::fs::read_to_string(host.path().join("d")).unwrap_or_default();
        self.ms += t.elapsed().as_millis() as u64;
        Ok(text.lines().filter_map(parse_entry).collect())
    }

    /// Copies `files` (and `/tests`) into the host layer's `up/`, and makes `links` there
    /// with their targets in the sandbox.
    pub async fn copy_out(
        &mut self,
        sb: &dyn Sandbox,
        files: &[String],
        links: &[String],
    ) -> Result<(), String> {
        let t = Instant::now();
        let dir = self.staged.clone().ok_or("busybox is not in the sandbox")?;
        let mut list: Vec<String> = files.to_vec();
        list.push("/tests".into());
        let out = self
            .run(sb, (&dir, ""), COPY, &[], (links, Some(nul_list(&list))))
            .await?;
        let host = self.fetch(sb, &dir, "out").await?;
        self.check_copy(sb, &dir).await?;
        let up = self.mirror.path().join("up");
        move_tree(&host.path().join("d"), &up).map_err(|e| e.to_string())?;
        let targets = out.stdout.lines().filter_map(|l| l.strip_prefix("L|"));
        for (p, target) in links.iter().zip(targets) {
            let at = up.join(p.trim_start_matches('/'));
            if let Some(parent) = at.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            if !target.is_empty() {
                let _ = std::os::unix::fs::symlink(target, &at);
            }
        }
        self.ms += t.elapsed().as_millis() as u64;
        Ok(())
    }

    /// Copies the image file at `path` (read before the agent ran) to the image dir.
    pub async fn copy_image_file(&mut self, sb: &dyn Sandbox, path: &str) {
        let t = Instant::now();
        let to = self.image_dir().join(path.trim_start_matches('/'));
        if let Err(e) = sb.get(path, &to).await {
            tracing::warn!("copying {path} out of the sandbox: {e}");
        }
        self.ms += t.elapsed().as_millis() as u64;
    }
}

/// `paths` NUL-separated, for `xargs -0`.
fn nul_list(paths: &[String]) -> Vec<u8> {
    let mut b = Vec::new();
    for p in paths {
        b.extend_from_slice(p.as_bytes());
        b.push(0);
    }
    b
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
}

/// Moves the tree `from` into `to` (merging directories).
fn move_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let Ok(rd) = std::fs::read_dir(from) else {
        return Ok(());
    };
    std::fs::create_dir_all(to)?;
    for e in rd.flatten() {
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() && dest.is_dir() {
            move_tree(&e.path(), &dest)?;
        } else {
            let _ = std::fs::remove_file(&dest);
            std::fs::rename(e.path(), &dest)?;
        }
    }
    Ok(())
}

/// Reads the walk's stdout (`NOW|`, `T|` lines) and its listing.
pub fn parse_walk(stdout: &str, listing: &str) -> Walk {
    let mut w = Walk {
        snapshot: Snapshot::default(),
        now: (0, 0),
        test_atime: None,
        handover: None,
        unreadable: 0,
        caps: None,
        sums: None,
    };
    for l in stdout.lines() {
        if let Some(c) = l.strip_prefix("CAPS|") {
            w.caps = u64::from_str_radix(c.trim(), 16).ok();
        } else if let Some(s) = l.strip_prefix("NOW|") {
            w.now = (s.trim().parse().unwrap_or(0), 999_999_999);
        } else if l.starts_with("T|") {
            w.test_atime = parse_entry(&format!("E{}", &l[1..])).map(|(_, s)| s.atime);
        }
    }
    for l in listing.lines() {
        if w.snapshot.len() >= MAX_ENTRIES {
            w.snapshot.truncated = true;
            break;
        }
        match parse_entry(l) {
            Some((p, _)) if crate::changes::skip_sandbox_path(&p) => {}
            Some((p, _)) if ENGINE_FILES.contains(&p.as_str()) => {}
            Some((p, s)) => w.snapshot.insert_raw(p, s),
            None => w.unreadable += 1,
        }
    }
    w
}

/// Files whose MD5 at the hand-over differs from the baseline's although the walks saw no
/// change of them (same inode, size, mtime and ctime: the times were forged); `changed` are
/// the paths the agent phase's change set holds.
pub fn forged(
    base: &HashMap<String, String>,
    now: &HashMap<String, String>,
    changed: &HashSet<&str>,
) -> Vec<String> {
    let mut v: Vec<String> = (now.iter())
        .filter(|(p, _)| !changed.contains(p.as_str()) && !ENGINE_FILES.contains(&p.as_str()))
        .filter(|(p, h)| base.get(*p).is_some_and(|b| b != *h))
        .map(|(p, _)| p.clone())
        .collect();
    v.sort();
    v
}

/// `md5sum`'s lines (`<32 hex>  <path>`) by path; other lines are left out.
pub fn parse_sums(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (sum, path) = (l.get(..32)?, l.get(34..)?);
            let ok = sum.bytes().all(|b| b.is_ascii_hexdigit()) && path.starts_with('/');
            ok.then(|| (path.to_string(), sum.to_string()))
        })
        .collect()
}

/// One `E|` line of the walk: the path and its stat.
pub fn parse_entry(line: &str) -> Option<(String, RawStat)> {
    let rest = line.strip_prefix("E|")?;
    let f: Vec<&str> = rest.splitn(10, '|').collect();
    if f.len() != 10 || !f[9].starts_with('/') {
        return None;
    }
    let mode = u32::from_str_radix(f[0], 16).ok()?;
    let time = |secs: &str, date: &str| -> Option<(i64, i64)> {
        let s: i64 = secs.parse().ok()?;
        let frac = date.split_once('.').map_or("0", |(_, r)| r);
        let digits: String = frac.chars().take_while(|c| c.is_ascii_digit()).collect();
        let ns = format!("{digits:0<9}")[..9].parse().unwrap_or(0);
        Some((s, ns))
    };
    let kind = match mode & 0o170000 {
        0o100000 => Kind::File,
        0o040000 => Kind::Dir,
        0o120000 => Kind::Symlink,
        _ => Kind::Other,
    };
    let stat = RawStat {
        kind,
        ino: f[1].parse().ok()?,
        size: f[2].parse().ok()?,
        atime: time(f[3], f[4])?,
        mtime: time(f[5], f[6])?,
        ctime: time(f[7], f[8])?,
        mode,
    };
    Some((f[9].to_string(), stat))
}

#[cfg(test)]
#[path = "inside_tests.rs"]
mod tests;
