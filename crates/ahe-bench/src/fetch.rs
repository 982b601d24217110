//! Benchmarks fetched by SPEC: `NAME@VERSION` from a small built-in registry (the git
//! repository and pinned commit Harbor's public dataset registry records), or
//! `git+URL[@REV][#SUBDIR]`. Fetched with git2 into
//! `~/.cache/ahe/benchmarks/<name>/<commit>/` (`$XDG_CACHE_HOME/ahe/...` when set), checked
//! out at exactly that commit (verified), and reused on the next call without touching the
//! network when the commit is known. `AHE_BENCH_REGISTRY=FILE` adds or replaces registry
//! entries (`[[benchmark]] name, version, url, commit, subdir`).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

/// One registry entry: a named, versioned benchmark at a pinned commit of a git repository.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegistryEntry {
    /// Benchmark name (`terminal-bench`).
    pub name: String,
    /// Version (`2.0`).
    pub version: String,
    /// Git repository URL.
    pub url: String,
    /// The full commit id the version is pinned to.
    pub commit: String,
    /// Directory of the tasks inside the repository (the root when unset).
    #[serde(default)]
    pub subdir: Option<String>,
}

/// The built-in registry: Terminal-Bench 2.0 as Harbor's `registry.json` records it
/// (every task of `terminal-bench@2.0` at this repository and commit, tasks at the root).
pub fn builtin_registry() -> Vec<RegistryEntry> {
    vec![RegistryEntry {
        name: "terminal-bench".into(),
        version: "2.0".into(),
        url: "https://github.com/laude-institute/terminal-bench-2.git".into(),
        commit: "69671fbaac6d67a7ef0dfec016cc38a64ef7a77c".into(),
        subdir: None,
    }]
}

/// The registry in force: `AHE_BENCH_REGISTRY` entries first, then the built-in ones.
pub fn registry() -> anyhow::Result<Vec<RegistryEntry>> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("AHE_BENCH_REGISTRY").filter(|p| !p.is_empty()) {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            benchmark: Vec<RegistryEntry>,
        }
        let p = PathBuf::from(p);
        let text = std::fs::read_to_string(&p)
            .with_context(|| format!("AHE_BENCH_REGISTRY={}: cannot read", p.display()))?;
        let f: File = toml::from_str(&text)
            .map_err(|e| anyhow!("AHE_BENCH_REGISTRY={}: {e}", p.display()))?;
        out.extend(f.benchmark);
    }
    out.extend(builtin_registry());
    Ok(out)
}

/// A parsed SPEC.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Cache name (registry name, or the repository's base name).
    pub name: String,
    /// Repository URL.
    pub url: String,
    /// Branch, tag or commit (`None`: the remote's default branch).
    pub rev: Option<String>,
    /// The commit the result must be at (registry entries and full-id revs).
    pub pinned: Option<String>,
    /// Task directory inside the repository.
    pub subdir: Option<String>,
    /// The SPEC as written.
    pub text: String,
}

/// Whether `s` is a full 40-hex commit id.
fn is_full_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `s` has the `NAME@VERSION` form.
fn is_name_version(s: &str) -> bool {
    let Some((n, v)) = s.split_once('@') else {
        return false;
    };
    let ok = |x: &str, first_alnum: bool| {
        !x.is_empty()
            && (!first_alnum || x.as_bytes()[0].is_ascii_alphanumeric())
            && x.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    ok(n, true) && ok(v, false)
}

/// Whether a benchmark path is a fetch SPEC rather than a directory (`git+…`, or
/// `NAME@VERSION` naming no existing path).
pub fn is_spec(s: &str) -> bool {
    s.starts_with("git+") || (is_name_version(s) && !Path::new(s).exists())
}

/// Parses a SPEC (registry names are looked up).
pub fn parse(spec: &str) -> anyhow::Result<Spec> {
    if let Some(rest) = spec.strip_prefix("git+") {
        let (rest, subdir) = match rest.rsplit_once('#') {
            Some((r, s)) if !s.is_empty() => (r, Some(s.trim_matches('/').to_string())),
            Some((r, _)) => (r, None),
            None => (rest, None),
        };
        let last_slash = rest.rfind('/').unwrap_or(0);
        let (url, rev) = match rest.rfind('@') {
            Some(i) if i > last_slash => (&rest[..i], Some(rest[i + 1..].to_string())),
            _ => (rest, None),
        };
        if url.is_empty() || !url.contains(':') {
            bail!("{spec:?}: expected git+URL[@REV][#SUBDIR], e.g. git+https://github.com/ORG/REPO.git@v1#tasks");
        }
        let base = url.trim_end_matches('/').rsplit('/').next().unwrap_or(url);
        let name = base.trim_end_matches(".git").to_string();
        let pinned = rev.clone().filter(|r| is_full_commit(r));
        return Ok(Spec {
            name: if name.is_empty() { "repo".into() } else { name },
            url: url.to_string(),
            rev,
            pinned,
            subdir,
            text: spec.to_string(),
        });
    }
    if !is_name_version(spec) {
        bail!("{spec:?} is not a benchmark SPEC: use NAME@VERSION (e.g. terminal-bench@2.0) or git+URL[@REV][#SUBDIR]");
    }
    let (name, version) = spec.split_once('@').expect("checked");
    let reg = registry()?;
    let Some(e) = reg.iter().find(|e| e.name == name && e.version == version) else {
        let known: Vec<String> = reg
            .iter()
            .map(|e| format!("{}@{}", e.name, e.version))
            .collect();
        bail!(
            "{spec:?}: no such benchmark in the registry (known: {}); use git+URL[@REV] for others",
            known.join(", ")
        );
    };
    if !is_full_commit(&e.commit) {
        bail!(
            "registry entry {spec}: commit {:?} is not a full commit id",
            e.commit
        );
    }
    Ok(Spec {
        name: e.name.clone(),
        url: e.url.clone(),
        rev: Some(e.commit.clone()),
        pinned: Some(e.commit.clone()),
        subdir: e.subdir.clone(),
        text: spec.to_string(),
    })
}

/// Where fetched benchmarks are kept: `$XDG_CACHE_HOME/ahe/benchmarks`, else
/// `~/.cache/ahe/benchmarks`.
pub fn cache_root() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| std::env::temp_dir().join("ahe-cache"));
    base.join("ahe").join("benchmarks")
}

/// A fetched benchmark.
#[derive(Debug, Clone, Serialize)]
pub struct Fetched {
    /// The checkout (repository root at the commit).
    pub checkout: PathBuf,
    /// The task directory (`checkout/SUBDIR`).
    pub path: PathBuf,
    /// The commit checked out.
    pub commit: String,
    /// The repository URL.
    pub url: String,
    /// Whether the cache already held it (no network used).
    pub cached: bool,
}

/// The record a finished fetch leaves in its checkout.
const MARKER: &str = ".ahe-fetch.json";

#[derive(Serialize, Deserialize)]
struct Marker {
    url: String,
    commit: String,
}

/// The commit a checkout's repository has at HEAD.
fn head_commit(dir: &Path) -> Option<String> {
    let repo = git2::Repository::open(dir).ok()?;
    let c = repo.head().ok()?.peel_to_commit().ok()?;
    Some(c.id().to_string())
}

/// Whether `dir` holds a verified checkout of `commit`.
fn verified(dir: &Path, commit: &str) -> bool {
    let marked = std::fs::read_to_string(dir.join(MARKER))
        .ok()
        .and_then(|t| serde_json::from_str::<Marker>(&t).ok())
        .is_some_and(|m| m.commit == commit);
    marked && head_commit(dir).as_deref() == Some(commit)
}

/// The error for a fetch that could not reach or read the repository.
fn unreachable(spec: &Spec, cache: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    let commit = spec.pinned.as_deref().unwrap_or("<COMMIT>");
    let dir = cache.join(&spec.name).join(commit);
    anyhow!(
        "cannot fetch {} from {}: {e}. Offline? Fill the cache dir {} by hand (on a machine \
         that reaches the repository: `git clone {} DIR && git -C DIR checkout --detach \
         {commit}`, then copy DIR there)",
        spec.text,
        spec.url,
        dir.display(),
        spec.url,
    )
}

/// Fetches a SPEC into the cache (or `to`), verifies the commit, and returns where it is.
pub fn fetch(spec_text: &str, to: Option<&Path>) -> anyhow::Result<Fetched> {
    let spec = parse(spec_text)?;
    let cache = cache_root();
    // A known commit already fetched: no network.
    if let Some(c) = &spec.pinned {
        if let Some(f) = cached_checkout(&spec, &target(&spec, &cache, to, c), c)? {
            return Ok(f);
        }
    }
    clone_into_place(&spec, &cache, to)
}

/// Where the checkout of `commit` goes: `to`, else its folder in the cache.
fn target(spec: &Spec, cache: &Path, to: Option<&Path>, commit: &str) -> PathBuf {
    match to {
        Some(d) => d.to_path_buf(),
        None => cache.join(&spec.name).join(commit),
    }
}

/// The tasks' folder of a checkout (its `#SUBDIR`, else the checkout), which must exist.
fn with_subdir(spec: &Spec, checkout: &Path) -> anyhow::Result<PathBuf> {
    let p = match &spec.subdir {
        Some(s) => checkout.join(s),
        None => checkout.to_path_buf(),
    };
    if !p.is_dir() {
        bail!(
            "{}: #{} is not a directory at this commit",
            spec.text,
            spec.subdir.as_deref().unwrap_or("")
        );
    }
    Ok(p)
}

/// The result of a fetch whose checkout of `commit` is at `dir`.
fn fetched(spec: &Spec, dir: PathBuf, commit: String, cached: bool) -> anyhow::Result<Fetched> {
    Ok(Fetched {
        path: with_subdir(spec, &dir)?,
        checkout: dir,
        commit,
        url: spec.url.clone(),
        cached,
    })
}

/// The checkout of the pinned commit `c` at `dir` if it is there (verified, or a clone at
/// that commit filled by hand, which gets marked); an error if `dir` holds something else.
fn cached_checkout(spec: &Spec, dir: &Path, c: &str) -> anyhow::Result<Option<Fetched>> {
    if verified(dir, c) {
        return fetched(spec, dir.to_path_buf(), c.to_string(), true).map(Some);
    }
    // Filled by hand: a clone at the right commit is accepted (and marked).
    if head_commit(dir).as_deref() == Some(c) {
        write_marker(dir, &spec.url, c)?;
        return fetched(spec, dir.to_path_buf(), c.to_string(), true).map(Some);
    }
    if dir.exists() && std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} exists but is not a checkout of {c} (HEAD is {}); remove it and fetch again",
            dir.display(),
            head_commit(dir).unwrap_or_else(|| "not a git repository".into())
        );
    }
    Ok(None)
}

/// Clones the SPEC into a temporary folder beside its target, checks the pinned commit, marks
/// it, and moves it into place (unless a verified checkout of that commit is there already).
fn clone_into_place(spec: &Spec, cache: &Path, to: Option<&Path>) -> anyhow::Result<Fetched> {
    let parent = match to {
        Some(d) => d
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf(),
        None => cache.join(&spec.name),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a temp dir in {}", parent.display()))?;
    let commit = clone_at(spec, tmp.path()).map_err(|e| match e {
        CloneError::Net(m) => unreachable(spec, cache, m),
        CloneError::Other(e) => e,
    })?;
    if let Some(p) = &spec.pinned {
        if !commit.eq_ignore_ascii_case(p) {
            bail!(
                "{}: the repository gave commit {commit}, not the pinned {p}; refused",
                spec.text
            );
        }
    }
    write_marker(tmp.path(), &spec.url, &commit)?;
    let dir = target(spec, cache, to, &commit);
    if verified(&dir, &commit) {
        // Fetched meanwhile (or a moving rev that resolved to a commit we have).
        return fetched(spec, dir, commit, true);
    }
    if dir.exists() {
        std::fs::remove_dir(&dir).map_err(|e| {
            anyhow!(
                "{} exists and is not empty ({e}); remove it or pick another --to",
                dir.display()
            )
        })?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, &dir)
        .with_context(|| format!("moving the checkout to {}", dir.display()))?;
    fetched(spec, dir, commit, false)
}

fn write_marker(dir: &Path, url: &str, commit: &str) -> anyhow::Result<()> {
    let m = Marker {
        url: url.to_string(),
        commit: commit.to_string(),
    };
    std::fs::write(dir.join(MARKER), serde_json::to_vec_pretty(&m)?)
        .with_context(|| format!("writing {}", dir.join(MARKER).display()))
}

/// Why a clone failed: the network/repository (the cache can be filled by hand), or else.
enum CloneError {
    Net(String),
    Other(anyhow::Error),
}

/// Fetches `spec.url` into `dest` and checks out the commit `spec.rev` names (the remote's
/// default branch when none); returns the commit id.
fn clone_at(spec: &Spec, dest: &Path) -> Result<String, CloneError> {
    let other = |e: git2::Error| CloneError::Other(anyhow!("{}: {}", spec.text, e.message()));
    let repo = git2::Repository::init(dest).map_err(other)?;
    let mut remote = repo.remote("origin", &spec.url).map_err(other)?;
    let refspecs = [
        "+refs/heads/*:refs/remotes/origin/*",
        "+refs/tags/*:refs/tags/*",
        "+HEAD:refs/remotes/origin/HEAD",
    ];
    remote
        .fetch(&refspecs, None, None)
        .map_err(|e| CloneError::Net(e.message().to_string()))?;
    let find = |rev: &str| -> Option<git2::Oid> {
        if is_full_commit(rev) {
            let oid = git2::Oid::from_str(rev).ok()?;
            return repo.find_commit(oid).ok().map(|c| c.id());
        }
        for name in [
            format!("refs/remotes/origin/{rev}"),
            format!("refs/tags/{rev}"),
            rev.to_string(),
        ] {
            if let Ok(o) = repo.revparse_single(&name) {
                if let Ok(c) = o.peel_to_commit() {
                    return Some(c.id());
                }
            }
        }
        None
    };
    let rev = spec.rev.as_deref().unwrap_or("HEAD");
    let mut oid = find(rev);
    if oid.is_none() && is_full_commit(rev) {
        // A commit on no branch or tag: ask for it by id (servers that allow it).
        if remote.fetch(&[rev], None, None).is_ok() {
            oid = find(rev);
        }
    }
    let Some(oid) = oid else {
        return Err(CloneError::Other(anyhow!(
            "{}: {} {rev} is not in {}; refused (check the SPEC)",
            spec.text,
            if is_full_commit(rev) {
                "commit"
            } else {
                "revision"
            },
            spec.url
        )));
    };
    repo.set_head_detached(oid).map_err(other)?;
    repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force()))
        .map_err(other)?;
    Ok(oid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let s = parse("git+file:///tmp/x/bench.git@v1.2#tasks/").unwrap();
        assert_eq!(
            (
                s.name.as_str(),
                s.url.as_str(),
                s.rev.as_deref(),
                s.subdir.as_deref()
            ),
            (
                "bench",
                "file:///tmp/x/bench.git",
                Some("v1.2"),
                Some("tasks")
            )
        );
        assert_eq!(s.pinned, None);
        let c = "0123456789abcdef0123456789abcdef01234567";
        let s = parse(&format!("git+https://github.com/o/r.git@{c}")).unwrap();
        assert_eq!(s.pinned.as_deref(), Some(c));
        let s = parse("git+ssh://git@github.com/o/r").unwrap();
        assert_eq!(
            (s.url.as_str(), s.rev.as_deref()),
            ("ssh://git@github.com/o/r", None)
        );
        let tb = parse("terminal-bench@2.0").unwrap();
        assert_eq!(
            tb.url,
            "https://github.com/laude-institute/terminal-bench-2.git"
        );
        assert_eq!(
            tb.pinned.as_deref(),
            Some("69671fbaac6d67a7ef0dfec016cc38a64ef7a77c")
        );
        let e = parse("terminal-bench@9.9").unwrap_err().to_string();
        assert!(e.contains("terminal-bench@2.0"), "{e}");
        assert!(is_spec("terminal-bench@2.0") && is_spec("git+file:///x"));
        assert!(!is_spec("benchmarks/smoke") && !is_spec("/abs/dir"));
    }
}
