//! What `ahe view` serves and where it sits: the directories given (roots), the kind of each
//! directory under them (run, evaluation, matrix), and how a URL path maps to a page of
//! one of them or to a file inside a root — never outside one.
//!
//! URLs: `/d/<root>/<path inside the root>`. The pages that `ahe report` writes are
//! rendered on each request at the paths where `ahe report` would write them
//! (`<dir>/report.html`, `<dir>/report/trials/...`), so the report's relative links (trial
//! pages, manifests, diffs, trial directories) work unchanged.

use std::path::{Path, PathBuf};

use ahe_bench::layout::REPORT_HTML;

/// What kind of directory `ahe view` shows with a page of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An `ahe evolve` run directory (journal, run.toml or iterations/).
    Run,
    /// An evaluation directory (`ahe eval --out`, `ahe import harbor --out`): scores.json or
    /// trials/ (an evaluation still running has no scores.json yet).
    Eval,
    /// An `ahe matrix` output directory (matrix.json).
    Matrix,
}

impl Kind {
    /// The word shown in the run list.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::Eval => "evaluation",
            Kind::Matrix => "matrix",
        }
    }
}

/// The kind of `dir`, if `ahe view` has a page for it.
pub fn kind(dir: &Path) -> Option<Kind> {
    if !dir.is_dir() {
        return None;
    }
    if ahe_rundir::RunDir::new(dir).looks_like_run() {
        Some(Kind::Run)
    } else if dir.join("matrix.json").is_file() {
        Some(Kind::Matrix)
    } else if ahe_bench::EvalDir::new(dir).scores_path().is_file() || dir.join("trials").is_dir() {
        Some(Kind::Eval)
    } else {
        None
    }
}

/// One directory given on the command line.
#[derive(Debug, Clone)]
pub struct Root {
    /// Its canonical path (every file served must be under it, symlinks resolved).
    pub path: PathBuf,
    /// As the user wrote it.
    pub label: String,
}

/// A run, evaluation or matrix directory listed on the front page.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The directory.
    pub dir: PathBuf,
    /// Its kind.
    pub kind: Kind,
    /// Its name (the directory's).
    pub name: String,
    /// URL of its page.
    pub url: String,
}

/// What a request path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The page of a run, evaluation or matrix directory (its `report.html`).
    Page(PathBuf, Kind),
    /// A trial page of a run (`report/trials/<iter>/<task>/<attempt>.html`).
    RunTrial(PathBuf, u32, String, u32),
    /// A trial page of an evaluation (`report/trials/<task>/<attempt>.html`).
    EvalTrial(PathBuf, String, u32),
    /// A directory inside a root: redirected to its page if it has one, else listed.
    Dir(PathBuf),
    /// A file inside a root, served as it is (as text, never as a page).
    File(PathBuf),
}

/// Why a request path is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `..`, `.`, a backslash or NUL in the path, or a symlink out of the root.
    Outside,
    /// Nothing there.
    NotFound,
}

/// The roots and what they hold.
#[derive(Debug, Clone)]
pub struct Site {
    /// The directories given, in order (`/d/<index>/`).
    pub roots: Vec<Root>,
}

impl Site {
    /// The site over `dirs`, each of which must be a directory.
    pub fn new(dirs: &[PathBuf]) -> anyhow::Result<Site> {
        let mut roots = Vec::new();
        for d in dirs {
            let path = d.canonicalize().map_err(|e| {
                anyhow::anyhow!(
                    "{}: {e} (give run, evaluation or matrix directories, or a folder of them such as runs/)",
                    d.display()
                )
            })?;
            if !path.is_dir() {
                anyhow::bail!("{}: not a directory", d.display());
            }
            roots.push(Root {
                path,
                label: d.display().to_string(),
            });
        }
        Ok(Site { roots })
    }

    /// The runs, evaluations and matrices: each root that is one, else its subdirectories
    /// that are (one level down), by name.
    pub fn entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        for (i, r) in self.roots.iter().enumerate() {
            if let Some(k) = kind(&r.path) {
                out.push(entry(&r.path, k, format!("/d/{i}/")));
                continue;
            }
            let mut subs: Vec<(String, PathBuf)> = std::fs::read_dir(&r.path)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    (!name.starts_with('.')).then(|| (name, e.path()))
                })
                .collect();
            subs.sort();
            for (name, p) in subs {
                if let Some(k) = kind(&p) {
                    let url = format!("/d/{i}/{}/", ahe_report::url_segment(&name));
                    out.push(entry(&p, k, url));
                }
            }
        }
        out
    }

    /// Maps the path inside root `root` (percent-decoded, `/`-separated) to what it asks for.
    pub fn resolve(&self, root: usize, rest: &str) -> Result<Target, Refusal> {
        let r = self.roots.get(root).ok_or(Refusal::NotFound)?;
        let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        if segs
            .iter()
            .any(|s| *s == ".." || *s == "." || s.contains('\\') || s.contains('\0'))
        {
            return Err(Refusal::Outside);
        }
        if let Some(t) = dynamic(&r.path, &segs) {
            // The page's directory must itself be inside the root (no symlink out).
            let base = match &t {
                Target::Page(d, _) | Target::RunTrial(d, ..) | Target::EvalTrial(d, ..) => d,
                _ => unreachable!("dynamic targets are pages"),
            };
            inside(&r.path, base)?;
            return Ok(t);
        }
        let p = segs.iter().fold(r.path.clone(), |p, s| p.join(s));
        let real = inside(&r.path, &p)?;
        if real.is_dir() {
            Ok(Target::Dir(real))
        } else {
            Ok(Target::File(real))
        }
    }
}

fn entry(dir: &Path, kind: Kind, url: String) -> Entry {
    Entry {
        dir: dir.to_path_buf(),
        kind,
        name: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string()),
        url: format!("{url}{REPORT_HTML}"),
    }
}

/// `p` resolved (symlinks included), when it exists and is inside `root`.
fn inside(root: &Path, p: &Path) -> Result<PathBuf, Refusal> {
    let real = p.canonicalize().map_err(|_| Refusal::NotFound)?;
    if real.starts_with(root) {
        Ok(real)
    } else {
        Err(Refusal::Outside)
    }
}

/// The rendered page a path names, if it names one: `<dir>/report.html` of a run,
/// evaluation or matrix, or a trial page under `<dir>/report/trials/`.
fn dynamic(root: &Path, segs: &[&str]) -> Option<Target> {
    let join = |n: usize| segs[..n].iter().fold(root.to_path_buf(), |p, s| p.join(s));
    let n = segs.len();
    if segs.last() == Some(&REPORT_HTML) {
        let d = join(n - 1);
        return kind(&d).map(|k| Target::Page(d, k));
    }
    let attempt = |s: &str| s.strip_suffix(".html")?.parse::<u32>().ok();
    // Run: <dir>/report/trials/<iter>/<task>/<attempt>.html
    if n >= 5 && segs[n - 5] == "report" && segs[n - 4] == "trials" {
        let d = join(n - 5);
        if kind(&d) == Some(Kind::Run) {
            let it = segs[n - 3].parse::<u32>().ok()?;
            let a = attempt(segs[n - 1])?;
            return Some(Target::RunTrial(d, it, segs[n - 2].to_string(), a));
        }
    }
    // Evaluation: <dir>/report/trials/<task>/<attempt>.html
    if n >= 4 && segs[n - 4] == "report" && segs[n - 3] == "trials" {
        let d = join(n - 4);
        if kind(&d) == Some(Kind::Eval) {
            let a = attempt(segs[n - 1])?;
            return Some(Target::EvalTrial(d, segs[n - 2].to_string(), a));
        }
    }
    None
}

/// The run, evaluation or matrix directory whose page shows `target`, if any (the
/// directory a live page watches).
pub fn watched(target: &Target) -> Option<(PathBuf, Kind)> {
    match target {
        Target::Page(d, k) => Some((d.clone(), *k)),
        Target::RunTrial(d, ..) => Some((d.clone(), Kind::Run)),
        Target::EvalTrial(d, ..) => Some((d.clone(), Kind::Eval)),
        Target::Dir(_) | Target::File(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root holding a run `r` (with one trial) and an evaluation `e`.
    fn site() -> (tempfile::TempDir, Site) {
        let d = tempfile::tempdir().unwrap();
        let run = d.path().join("r");
        std::fs::create_dir_all(run.join("iterations/001/trials/t/1")).unwrap();
        std::fs::write(run.join("journal.jsonl"), "").unwrap();
        std::fs::create_dir_all(d.path().join("e/trials")).unwrap();
        let s = Site::new(&[d.path().to_path_buf()]).unwrap();
        (d, s)
    }

    #[test]
    fn report_paths_name_pages_and_trial_pages() {
        let (d, s) = site();
        let root = d.path().canonicalize().unwrap();
        assert_eq!(
            s.resolve(0, "r/report.html"),
            Ok(Target::Page(root.join("r"), Kind::Run))
        );
        assert_eq!(
            s.resolve(0, "r/report/trials/001/t/1.html"),
            Ok(Target::RunTrial(root.join("r"), 1, "t".into(), 1))
        );
        assert_eq!(
            s.resolve(0, "e/report/trials/t/2.html"),
            Ok(Target::EvalTrial(root.join("e"), "t".into(), 2))
        );
        assert_eq!(
            s.resolve(0, "r/iterations/001/trials/t/1/"),
            Ok(Target::Dir(root.join("r/iterations/001/trials/t/1")))
        );
        let names: Vec<_> = s
            .entries()
            .iter()
            .map(|e| (e.name.clone(), e.kind))
            .collect();
        assert_eq!(
            names,
            [("e".to_string(), Kind::Eval), ("r".to_string(), Kind::Run)]
        );
    }

    #[test]
    fn dot_segments_and_backslashes_are_refused() {
        let (_d, s) = site();
        for p in ["../x", "r/../../x", "./r", "r\\..\\x", "r/\0"] {
            assert_eq!(s.resolve(0, p), Err(Refusal::Outside), "{p:?}");
        }
        assert_eq!(s.resolve(0, "nothing"), Err(Refusal::NotFound));
        assert_eq!(s.resolve(3, "r"), Err(Refusal::NotFound));
    }
}
