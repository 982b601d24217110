//! Format validation of benchmark task directories (`ahe bench check` without runs).
//!
//! A task passes when it has no [`Severity::Error`] finding; warnings are printed but never
//! fail a check. What is checked: `task.toml` parses with the right types (via
//! [`Task::load`]) and names a difficulty and category; `instruction.md` is non-empty;
//! `tests/test.sh` exists, has Unix line endings and (it or a file beside it) writes
//! `/logs/verifier/reward.txt|json`; `solution/solve.sh` exists (warning when not) and can be
//! run with `bash`; the environment has a Dockerfile or a `docker_image`; the Dockerfile
//! starts `FROM` an image and every local `COPY`/`ADD` source exists in `environment/`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use ahe_sandbox::dockerfile::{Dockerfile, Instruction};
use serde::Serialize;

use crate::task::{Task, TaskError};

/// Difficulty values Terminal-Bench 2 uses.
pub const DIFFICULTIES: [&str; 3] = ["easy", "medium", "hard"];

/// The path a verifier must write its reward under.
pub const REWARD_PATH: &str = "/logs/verifier/reward";

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The task cannot be used as it is.
    Error,
    /// Worth fixing; does not fail the check.
    Warning,
}

/// One problem found in a task.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, naming the file, and what to do.
    pub message: String,
}

/// The format check of one task directory.
#[derive(Debug, Clone, Serialize)]
pub struct FormatCheck {
    /// Directory name of the task.
    pub name: String,
    /// The task directory.
    pub dir: PathBuf,
    /// The loaded task, when `task.toml` and the required files load.
    #[serde(skip)]
    pub task: Option<Task>,
    /// Everything found, errors first.
    pub findings: Vec<Finding>,
}

impl FormatCheck {
    /// Whether the task has no error (warnings allowed).
    pub fn ok(&self) -> bool {
        self.errors().next().is_none()
    }

    /// The error messages.
    pub fn errors(&self) -> impl Iterator<Item = &str> {
        self.by(Severity::Error)
    }

    /// The warning messages.
    pub fn warnings(&self) -> impl Iterator<Item = &str> {
        self.by(Severity::Warning)
    }

    fn by(&self, s: Severity) -> impl Iterator<Item = &str> {
        self.findings
            .iter()
            .filter(move |f| f.severity == s)
            .map(|f| f.message.as_str())
    }
}

/// Collects findings of one task.
#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn error(&mut self, m: impl Into<String>) {
        self.0.push(Finding {
            severity: Severity::Error,
            message: m.into(),
        });
    }
    fn warn(&mut self, m: impl Into<String>) {
        self.0.push(Finding {
            severity: Severity::Warning,
            message: m.into(),
        });
    }
}

/// The task directories of a benchmark (subdirectories holding `task.toml`), sorted; a
/// directory that itself holds `task.toml` is a benchmark of that one task.
pub fn task_dirs(bench: &Path) -> Result<Vec<PathBuf>, TaskError> {
    let resolved = crate::task::resolve_benchmark(bench)?;
    let bench = resolved.as_path();
    if bench.join("task.toml").is_file() {
        return Ok(vec![bench.to_path_buf()]);
    }
    let rd = std::fs::read_dir(bench).map_err(|e| TaskError {
        file: bench.to_path_buf(),
        message: format!("cannot read benchmark dir: {e}"),
    })?;
    let mut dirs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("task.toml").is_file())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(TaskError {
            file: bench.to_path_buf(),
            message: "no task directories (subdirectories with task.toml) found".into(),
        });
    }
    Ok(dirs)
}

/// Checks the format of every task of a benchmark.
pub fn check_benchmark(bench: &Path) -> Result<Vec<FormatCheck>, TaskError> {
    Ok(task_dirs(bench)?.iter().map(|d| check_task(d)).collect())
}

/// Checks the format of one task directory (never fails: problems become findings).
pub fn check_task(dir: &Path) -> FormatCheck {
    let mut f = Findings::default();
    let task = match Task::load(dir) {
        Ok(t) => Some(t),
        Err(e) => {
            f.error(e.to_string());
            None
        }
    };
    check_toml(dir, &mut f);
    check_tests(dir, &mut f);
    check_solution(dir, &mut f);
    check_environment(dir, &mut f);
    // Task::load stops at its first problem, which the checks above may repeat.
    let mut findings = f.0;
    let mut seen = std::collections::HashSet::new();
    findings.retain(|x| seen.insert(x.message.clone()));
    findings.sort_by_key(|x| x.severity != Severity::Error);
    FormatCheck {
        name: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        dir: dir.to_path_buf(),
        task,
        findings,
    }
}

/// `task.toml` keys that [`Task::load`] accepts silently but a benchmark should set.
fn check_toml(dir: &Path, f: &mut Findings) {
    let path = dir.join("task.toml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return; // reported by Task::load
    };
    let Ok(v) = text.parse::<toml::Table>() else {
        return; // reported by Task::load
    };
    let p = path.display();
    if !v.contains_key("schema_version") && !v.contains_key("version") {
        f.warn(format!(
            "{p}: no schema_version (use schema_version = \"1.1\")"
        ));
    }
    let meta = v.get("metadata").and_then(|m| m.as_table());
    match meta.and_then(|m| m.get("difficulty")) {
        None => f.warn(format!(
            "{p}: metadata.difficulty is not set (easy, medium or hard)"
        )),
        Some(toml::Value::String(d)) if !DIFFICULTIES.contains(&d.as_str()) => f.warn(format!(
            "{p}: metadata.difficulty = {d:?} is not one of easy, medium, hard"
        )),
        Some(_) => {}
    }
    if meta.and_then(|m| m.get("category")).is_none() {
        f.warn(format!("{p}: metadata.category is not set"));
    }
    let agent_timeout = v
        .get("agent")
        .and_then(|a| a.as_table())
        .and_then(|a| a.get("timeout_sec"));
    if agent_timeout.is_none() {
        f.warn(format!(
            "{p}: agent.timeout_sec is not set (the runner's default applies)"
        ));
    }
    for section in ["metadata", "agent", "verifier", "environment"] {
        if let Some(s) = v.get(section) {
            if !s.is_table() {
                f.error(format!("{p}: `{section}` must be a table ([{section}])"));
            }
        }
    }
}

/// `tests/test.sh`: present, Unix line endings, and something in `tests/` writes the reward.
fn check_tests(dir: &Path, f: &mut Findings) {
    let test_sh = dir.join("tests/test.sh");
    let Some(text) = read_script(&test_sh, f) else {
        return; // missing: reported by Task::load
    };
    script_sanity(&test_sh, &text, f);
    let writes_reward = text.contains(REWARD_PATH)
        || walk_files(&dir.join("tests")).iter().any(|p| {
            std::fs::read(p)
                .map(|b| String::from_utf8_lossy(&b).contains(REWARD_PATH))
                .unwrap_or(false)
        });
    if !writes_reward {
        f.error(format!(
            "{}: nothing in tests/ mentions {REWARD_PATH}.txt (or .json); the verifier must \
             write the reward there",
            test_sh.display()
        ));
    }
}

/// `solution/solve.sh`: optional (warning), run with `bash` by the oracle.
fn check_solution(dir: &Path, f: &mut Findings) {
    let solve = dir.join("solution/solve.sh");
    if !solve.exists() {
        f.warn(format!(
            "{}: missing (no oracle solution: `--oracle` cannot check this task)",
            solve.display()
        ));
        return;
    }
    let Some(text) = read_script(&solve, f) else {
        return;
    };
    script_sanity(&solve, &text, f);
    if let Some(interp) = shebang(&text) {
        if !is_shell(&interp) {
            f.error(format!(
                "{}: shebang `{interp}` is not a shell, but the oracle runs `bash solve.sh`",
                solve.display()
            ));
        }
    }
}

/// Reads a script, reporting an unreadable or non-UTF-8 one; `None` when missing or bad.
fn read_script(path: &Path, f: &mut Findings) -> Option<String> {
    if !path.exists() {
        return None;
    }
    if !path.is_file() {
        f.error(format!("{}: is not a file", path.display()));
        return None;
    }
    match std::fs::read(path) {
        Ok(b) => match String::from_utf8(b) {
            Ok(s) => Some(s),
            Err(_) => {
                f.error(format!("{}: is not UTF-8 text", path.display()));
                None
            }
        },
        Err(e) => {
            f.error(format!("{}: cannot read: {e}", path.display()));
            None
        }
    }
}

/// Line endings, emptiness, shebang and exec bit of a script.
fn script_sanity(path: &Path, text: &str, f: &mut Findings) {
    let p = path.display();
    if text.trim().is_empty() {
        f.error(format!("{p}: is empty"));
        return;
    }
    if text.contains("\r\n") {
        f.error(format!(
            "{p}: has Windows (CRLF) line endings; bash fails on them (convert with dos2unix)"
        ));
    }
    let executable = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    match shebang(text) {
        None if executable => f.warn(format!(
            "{p}: is executable but has no `#!` line (add `#!/bin/bash`)"
        )),
        None => f.warn(format!("{p}: has no `#!` line (add `#!/bin/bash`)")),
        Some(i) if i.is_empty() => f.error(format!("{p}: empty `#!` line")),
        Some(_) => {}
    }
}

/// The interpreter of a `#!` line (`/usr/bin/env bash` → `bash`), if there is one.
fn shebang(text: &str) -> Option<String> {
    let first = text.lines().next()?.strip_prefix("#!")?.trim();
    let mut words = first.split_whitespace();
    let prog = words.next().unwrap_or("");
    let name = prog.rsplit('/').next().unwrap_or(prog);
    if name == "env" {
        let arg = words.find(|w| !w.starts_with('-')).unwrap_or("");
        return Some(arg.to_string());
    }
    Some(name.to_string())
}

fn is_shell(name: &str) -> bool {
    matches!(name, "bash" | "sh" | "dash")
}

/// Every regular file under `dir` (recursively), sorted.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// The Dockerfile: `FROM` first, `COPY`/`ADD` sources inside the context and present.
fn check_environment(dir: &Path, f: &mut Findings) {
    let ctx = dir.join("environment");
    let path = ctx.join("Dockerfile");
    if !path.is_file() {
        for other in ["docker-compose.yaml", "docker-compose.yml"] {
            if ctx.join(other).is_file() {
                f.warn(format!(
                    "{}: compose environments are not supported; ahe needs a Dockerfile or \
                     environment.docker_image",
                    ctx.join(other).display()
                ));
            }
        }
        return; // no Dockerfile and no image: reported by Task::load
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            f.error(format!("{}: cannot read: {e}", path.display()));
            return;
        }
    };
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    let kw = first
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    if kw != "FROM" && kw != "ARG" {
        f.error(format!(
            "{}: must start with FROM (first instruction: {:?})",
            path.display(),
            first
        ));
    }
    let df = match Dockerfile::parse(&text, &path) {
        Ok(d) => d,
        Err(e) => {
            f.warn(format!(
                "{e} (the docker backend may still build it; the local backend cannot replay it)"
            ));
            return;
        }
    };
    if !df
        .steps
        .iter()
        .any(|s| matches!(s.instruction, Instruction::From(_)))
    {
        f.error(format!("{}: has no FROM instruction", path.display()));
    }
    for step in &df.steps {
        let Instruction::Copy { sources, add, .. } = &step.instruction else {
            continue;
        };
        let kw = if *add { "ADD" } else { "COPY" };
        for src in sources {
            if let Some(m) = copy_source_problem(&ctx, src) {
                f.error(format!("{}:{}: {kw} {src}: {m}", path.display(), step.line));
            }
        }
    }
}

/// Why a `COPY` source does not resolve inside the build context, if it does not.
fn copy_source_problem(ctx: &Path, src: &str) -> Option<String> {
    let rel = Path::new(src.trim_start_matches('/'));
    if rel.components().any(|c| c == Component::ParentDir) {
        return Some("points outside the build context (environment/)".into());
    }
    if src.contains(['*', '?', '[']) {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let pattern = rel.file_name()?.to_string_lossy().into_owned();
        let any = std::fs::read_dir(ctx.join(parent))
            .map(|rd| {
                rd.flatten()
                    .any(|e| glob_match(&pattern, &e.file_name().to_string_lossy()))
            })
            .unwrap_or(false);
        return (!any).then(|| "matches no file in environment/".into());
    }
    (!ctx.join(rel).exists()).then(|| "not found in environment/ (the build context)".into())
}

/// Shell-style match of `*` and `?` (a `[` class matches any one character).
fn glob_match(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some('*') => (0..=n.len()).any(|i| go(&p[1..], &n[i..])),
            Some('?') => !n.is_empty() && go(&p[1..], &n[1..]),
            Some('[') => {
                let close = p.iter().position(|&c| c == ']').unwrap_or(0);
                !n.is_empty() && close > 0 && go(&p[close + 1..], &n[1..])
            }
            Some(c) => n.first() == Some(c) && go(&p[1..], &n[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn good_task(root: &Path) -> PathBuf {
        let d = root.join("t");
        write(
            &d,
            "task.toml",
            "schema_version = \"1.1\"\n[metadata]\ndifficulty = \"easy\"\ncategory = \"x\"\n\
             [agent]\ntimeout_sec = 60.0\n",
        );
        write(&d, "instruction.md", "Do it.");
        write(
            &d,
            "tests/test.sh",
            "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        );
        write(&d, "solution/solve.sh", "#!/bin/bash\ntrue\n");
        write(
            &d,
            "environment/Dockerfile",
            "FROM ahe-base:bookworm\nWORKDIR /app\nCOPY data.txt /app/\nCOPY *.csv /app/\n",
        );
        write(&d, "environment/data.txt", "x");
        write(&d, "environment/a.csv", "x");
        d
    }

    #[test]
    fn a_good_task_has_no_findings() {
        let tmp = tempfile::tempdir().unwrap();
        let d = good_task(tmp.path());
        let c = check_task(&d);
        assert!(c.ok() && c.findings.is_empty(), "{:?}", c.findings);
        assert!(c.task.is_some());
        // A benchmark dir lists its tasks; a task dir is a benchmark of one task.
        assert_eq!(task_dirs(tmp.path()).unwrap(), vec![d.clone()]);
        assert_eq!(task_dirs(&d).unwrap(), vec![d.clone()]);
        assert!(task_dirs(&d.join("tests")).is_err());
    }

    #[test]
    fn problems_are_found() {
        let tmp = tempfile::tempdir().unwrap();
        let d = good_task(tmp.path());
        std::fs::remove_file(d.join("environment/data.txt")).unwrap();
        std::fs::remove_file(d.join("environment/a.csv")).unwrap();
        write(&d, "tests/test.sh", "#!/bin/bash\r\necho 1 > /tmp/r\r\n");
        write(
            &d,
            "solution/solve.sh",
            "#!/usr/bin/env python3\nprint(1)\n",
        );
        write(&d, "task.toml", "[metadata]\ndifficulty = \"trivial\"\n");
        let c = check_task(&d);
        let errors: Vec<&str> = c.errors().collect();
        let all = errors.join("\n");
        assert!(!c.ok());
        assert!(all.contains("COPY data.txt: not found"), "{all}");
        assert!(all.contains("COPY *.csv: matches no file"), "{all}");
        assert!(all.contains("CRLF"), "{all}");
        assert!(all.contains("/logs/verifier/reward"), "{all}");
        assert!(all.contains("python3"), "{all}");
        let warnings: Vec<&str> = c.warnings().collect();
        let w = warnings.join("\n");
        assert!(
            w.contains("schema_version") && w.contains("\"trivial\""),
            "{w}"
        );
        assert!(
            w.contains("category") && w.contains("agent.timeout_sec"),
            "{w}"
        );
    }

    #[test]
    fn load_errors_and_missing_solution() {
        let tmp = tempfile::tempdir().unwrap();
        let d = good_task(tmp.path());
        std::fs::remove_dir_all(d.join("solution")).unwrap();
        write(&d, "task.toml", "[agent]\ntimeout_sec = \"soon\"\n");
        let c = check_task(&d);
        assert!(c.task.is_none());
        assert!(c.errors().any(|e| e.contains("timeout_sec")));
        assert!(c.warnings().any(|w| w.contains("solve.sh: missing")));
    }

    #[test]
    fn shebangs_and_globs() {
        assert_eq!(shebang("#!/usr/bin/env bash\n").as_deref(), Some("bash"));
        assert_eq!(shebang("#!/bin/sh -e\n").as_deref(), Some("sh"));
        assert_eq!(shebang("echo\n"), None);
        assert!(glob_match("*.csv", "a.csv") && !glob_match("*.csv", "a.txt"));
        assert!(glob_match("f?le[12]", "file1"));
    }
}
