//! Loading Terminal-Bench 2 / Harbor task directories.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Default verifier timeout when task.toml gives none (Harbor's default).
pub const DEFAULT_VERIFIER_TIMEOUT_SEC: f64 = 600.0;

/// A task as read from `<task>/task.toml` and its files.
#[derive(Debug, Clone, Serialize)]
pub struct Task {
    /// Directory name of the task.
    pub name: String,
    /// The task directory.
    pub dir: PathBuf,
    /// Contents of `instruction.md`.
    pub instruction: String,
    /// `[metadata]`.
    pub metadata: Metadata,
    /// `[agent].timeout_sec`, if set.
    pub agent_timeout_sec: Option<f64>,
    /// `[verifier].timeout_sec` (default 600).
    pub verifier_timeout_sec: f64,
    /// `[environment]`, normalised.
    pub environment: Environment,
    /// Whether `solution/solve.sh` exists.
    pub has_solution: bool,
    /// Where the task's verifier runs (`[verifier] environment_mode`, default shared).
    pub verifier_mode: EnvironmentMode,
    /// Paths a separate verifier receives from the agent's sandbox (top-level `artifacts`).
    pub artifacts: Vec<String>,
}

/// `[metadata]` of a task.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Metadata {
    /// easy / medium / hard.
    #[serde(default)]
    pub difficulty: Option<String>,
    /// Free-form category.
    #[serde(default)]
    pub category: Option<String>,
    /// Free-form tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// `[environment]` of a task, with the old (`memory = "4G"`) form normalised.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Environment {
    /// Prebuilt image, if named.
    pub docker_image: Option<String>,
    /// `environment/` dir when it holds a Dockerfile.
    pub context_dir: Option<PathBuf>,
    /// Image build timeout.
    pub build_timeout_sec: Option<f64>,
    /// CPU limit.
    pub cpus: Option<f64>,
    /// Memory limit in MiB.
    pub memory_mb: Option<u64>,
    /// Disk limit in MiB: enforced by the trial (`ahe_sandbox::storage`): no file past it
    /// (`RLIMIT_FSIZE`), and a sandbox whose writes exceed it is stopped as the agent's failure.
    pub storage_mb: Option<u64>,
    /// Whether the sandbox may reach the network (Harbor's default: true).
    pub allow_internet: bool,
}

/// A problem with one task, naming the file and field.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct TaskError {
    /// File the problem is in.
    pub file: PathBuf,
    /// What is wrong and what to do.
    pub message: String,
}

fn err(file: &Path, message: impl Into<String>) -> TaskError {
    TaskError {
        file: file.to_path_buf(),
        message: message.into(),
    }
}

#[derive(Deserialize)]
struct RawTask {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    agent: RawTimeout,
    #[serde(default)]
    verifier: RawVerifier,
    #[serde(default)]
    environment: RawEnv,
    /// Harbor's artifacts: paths (or `{source = ...}` tables) a separate verifier receives.
    #[serde(default)]
    artifacts: Vec<RawArtifact>,
}

#[derive(Deserialize, Default)]
struct RawTimeout {
    timeout_sec: Option<f64>,
}

#[derive(Deserialize, Default)]
struct RawVerifier {
    timeout_sec: Option<f64>,
    environment_mode: Option<EnvironmentMode>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawArtifact {
    Path(String),
    Table { source: String },
}

/// Where the verifier runs (Harbor's `[verifier] environment_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvironmentMode {
    /// In the agent's sandbox, after the hand-over (the default).
    #[default]
    Shared,
    /// In a fresh sandbox of the task's image that receives only the task's artifacts.
    Separate,
}

#[derive(Deserialize, Default)]
struct RawEnv {
    docker_image: Option<String>,
    build_timeout_sec: Option<f64>,
    cpus: Option<f64>,
    memory_mb: Option<u64>,
    memory: Option<String>,
    storage_mb: Option<u64>,
    storage: Option<String>,
    allow_internet: Option<bool>,
}

/// Parses a Docker-style size (`"4G"`, `"512M"`, `"2048"` = MiB) into MiB.
pub fn parse_size_mb(s: &str) -> Option<u64> {
    let t = s.trim().to_ascii_uppercase();
    let t = t.trim_end_matches('B').trim_end_matches('I');
    let (num, mult) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1.0 / 1024.0),
        'M' => (&t[..t.len() - 1], 1.0),
        'G' => (&t[..t.len() - 1], 1024.0),
        'T' => (&t[..t.len() - 1], 1024.0 * 1024.0),
        _ => (t, 1.0),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v >= 0.0).then(|| (v * mult).round() as u64)
}

impl Task {
    /// Loads and checks one task directory.
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        let toml_path = dir.join("task.toml");
        let text = std::fs::read_to_string(&toml_path)
            .map_err(|e| err(&toml_path, format!("cannot read: {e}")))?;
        let raw: RawTask = toml::from_str(&text).map_err(|e| err(&toml_path, e.to_string()))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| err(dir, "task directory has no name"))?;
        let instruction = read_instruction(dir)?;
        let test_sh = dir.join("tests/test.sh");
        if !test_sh.is_file() {
            return Err(err(
                &test_sh,
                "missing: every task needs tests/test.sh writing /logs/verifier/reward.txt",
            ));
        }
        let environment = environment(dir, &toml_path, raw.environment)?;
        for (field, v) in [
            ("agent.timeout_sec", raw.agent.timeout_sec),
            ("verifier.timeout_sec", raw.verifier.timeout_sec),
            ("environment.cpus", environment.cpus),
        ] {
            if let Some(v) = v {
                if !(v > 0.0 && v.is_finite()) {
                    return Err(err(
                        &toml_path,
                        format!("{field} = {v} must be a positive number"),
                    ));
                }
            }
        }
        Ok(Task {
            name,
            dir: dir.to_path_buf(),
            instruction,
            metadata: raw.metadata,
            agent_timeout_sec: raw.agent.timeout_sec,
            verifier_timeout_sec: raw
                .verifier
                .timeout_sec
                .unwrap_or(DEFAULT_VERIFIER_TIMEOUT_SEC),
            environment,
            has_solution: dir.join("solution/solve.sh").is_file(),
            verifier_mode: raw.verifier.environment_mode.unwrap_or_default(),
            artifacts: raw
                .artifacts
                .into_iter()
                .map(|a| match a {
                    RawArtifact::Path(p) | RawArtifact::Table { source: p } => p,
                })
                .collect(),
        })
    }

    /// The task's `tests/` directory.
    pub fn tests_dir(&self) -> PathBuf {
        self.dir.join("tests")
    }

    /// The task's `solution/` directory.
    pub fn solution_dir(&self) -> PathBuf {
        self.dir.join("solution")
    }
}

/// The task's `instruction.md`, which must not be empty.
fn read_instruction(dir: &Path) -> Result<String, TaskError> {
    let instr_path = dir.join("instruction.md");
    let instruction = std::fs::read_to_string(&instr_path).map_err(|e| {
        err(
            &instr_path,
            format!("cannot read the task instruction: {e}"),
        )
    })?;
    if instruction.trim().is_empty() {
        return Err(err(&instr_path, "instruction is empty"));
    }
    Ok(instruction)
}

/// The `[environment]` of `task.toml` normalised: sizes in MiB, the build context when
/// `environment/Dockerfile` exists (else an image must be named).
fn environment(dir: &Path, toml_path: &Path, env: RawEnv) -> Result<Environment, TaskError> {
    let memory_mb = size_mb(
        toml_path,
        "memory",
        env.memory_mb,
        env.memory.as_deref(),
        "\"2G\" or memory_mb = 2048",
    )?;
    let storage_mb = size_mb(
        toml_path,
        "storage",
        env.storage_mb,
        env.storage.as_deref(),
        "\"10G\" or storage_mb = 10240",
    )?;
    let dockerfile = dir.join("environment/Dockerfile");
    let context_dir = dockerfile.is_file().then(|| dir.join("environment"));
    if context_dir.is_none() && env.docker_image.is_none() {
        return Err(err(
            toml_path,
            "environment: neither environment/Dockerfile nor environment.docker_image is given",
        ));
    }
    Ok(Environment {
        docker_image: env.docker_image,
        context_dir,
        build_timeout_sec: env.build_timeout_sec,
        cpus: env.cpus,
        memory_mb,
        storage_mb,
        allow_internet: env.allow_internet.unwrap_or(true),
    })
}

/// A size of `[environment]` in MiB: `<field>_mb` when set, else `<field>` parsed as a size
/// (an error naming `example` when it is not one).
fn size_mb(
    toml_path: &Path,
    field: &str,
    mb: Option<u64>,
    text: Option<&str>,
    example: &str,
) -> Result<Option<u64>, TaskError> {
    match (mb, text) {
        (Some(mb), _) => Ok(Some(mb)),
        (None, Some(s)) => parse_size_mb(s).map(Some).ok_or_else(|| {
            err(
                toml_path,
                format!("environment.{field} = {s:?} is not a size; use e.g. {example}"),
            )
        }),
        (None, None) => Ok(None),
    }
}

/// The directory a benchmark path names: itself, or for a fetch SPEC (`terminal-bench@2.0`,
/// `git+URL[@REV][#SUBDIR]`) its checkout in the cache, fetched on first use.
pub fn resolve_benchmark(dir: &Path) -> Result<PathBuf, TaskError> {
    let Some(spec) = dir.to_str().filter(|s| crate::fetch::is_spec(s)) else {
        return Ok(dir.to_path_buf());
    };
    let f = crate::fetch::fetch(spec, None).map_err(|e| err(dir, format!("{e:#}")))?;
    if !f.cached {
        eprintln!(
            "ahe: fetched {spec} (commit {}) into {}",
            &f.commit[..12],
            f.path.display()
        );
    }
    Ok(f.path)
}

/// Loads every task directory (a subdirectory with `task.toml`) of a benchmark (a directory
/// or a fetch SPEC), sorted by name. Returns all tasks that loaded and every error of those
/// that did not.
pub fn load_benchmark(dir: &Path) -> Result<(Vec<Task>, Vec<TaskError>), TaskError> {
    let resolved = resolve_benchmark(dir)?;
    let dir = resolved.as_path();
    let rd =
        std::fs::read_dir(dir).map_err(|e| err(dir, format!("cannot read benchmark dir: {e}")))?;
    let mut dirs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("task.toml").is_file())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(err(
            dir,
            "no task directories (subdirectories with task.toml) found",
        ));
    }
    let mut tasks = Vec::new();
    let mut errors = Vec::new();
    for d in dirs {
        match Task::load(&d) {
            Ok(t) => tasks.push(t),
            Err(e) => errors.push(e),
        }
    }
    Ok((tasks, errors))
}

/// Keeps the tasks named in `include` (all when empty) minus those in `exclude`;
/// an unknown name is an error naming it.
pub fn select_tasks(
    tasks: Vec<Task>,
    include: &[String],
    exclude: &[String],
) -> anyhow::Result<Vec<Task>> {
    for n in include.iter().chain(exclude) {
        if !tasks.iter().any(|t| &t.name == n) {
            let known: Vec<&str> = tasks.iter().map(|t| t.name.as_str()).collect();
            anyhow::bail!(
                "unknown task {n:?}; tasks in this benchmark: {}",
                known.join(", ")
            );
        }
    }
    Ok(tasks
        .into_iter()
        .filter(|t| include.is_empty() || include.contains(&t.name))
        .filter(|t| !exclude.contains(&t.name))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_dir() -> Option<PathBuf> {
        let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tb2-sample");
        d.is_dir().then_some(d)
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size_mb("4G"), Some(4096));
        assert_eq!(parse_size_mb("512M"), Some(512));
        assert_eq!(parse_size_mb("2GiB"), Some(2048));
        assert_eq!(parse_size_mb("lots"), None);
    }

    #[test]
    fn loads_every_tb2_sample_task() {
        let Some(dir) = sample_dir() else {
            eprintln!("shared/tb2-sample not present; skipping");
            return;
        };
        let (tasks, errors) = load_benchmark(&dir).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(tasks.len(), 8);
        let fix_git = tasks.iter().find(|t| t.name == "fix-git").unwrap();
        assert_eq!(fix_git.metadata.difficulty.as_deref(), Some("easy"));
        assert_eq!(
            fix_git.metadata.category.as_deref(),
            Some("software-engineering")
        );
        assert_eq!(fix_git.agent_timeout_sec, Some(900.0));
        assert_eq!(fix_git.verifier_timeout_sec, 900.0);
        assert_eq!(fix_git.environment.memory_mb, Some(2048));
        assert_eq!(fix_git.environment.storage_mb, Some(10240));
        assert_eq!(fix_git.environment.cpus, Some(1.0));
        assert_eq!(
            fix_git.environment.docker_image.as_deref(),
            Some("alexgshaw/fix-git:20251031")
        );
        assert!(fix_git.environment.context_dir.is_some());
        assert!(fix_git.has_solution);
        let sched = tasks
            .iter()
            .find(|t| t.name == "constraints-scheduling")
            .unwrap();
        assert_eq!(sched.agent_timeout_sec, Some(1200.0));
        assert_eq!(sched.verifier_timeout_sec, 1200.0);
        assert_eq!(
            sched.metadata.category.as_deref(),
            Some("personal-assistant")
        );
        let hard: Vec<&str> = tasks
            .iter()
            .filter(|t| t.metadata.difficulty.as_deref() == Some("hard"))
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(hard, vec!["cancel-async-tasks"]);
    }

    fn write_task(root: &Path, name: &str, toml: &str) -> PathBuf {
        let d = root.join(name);
        std::fs::create_dir_all(d.join("tests")).unwrap();
        std::fs::create_dir_all(d.join("environment")).unwrap();
        std::fs::write(d.join("task.toml"), toml).unwrap();
        std::fs::write(d.join("instruction.md"), "do it").unwrap();
        std::fs::write(
            d.join("tests/test.sh"),
            "echo 1 > /logs/verifier/reward.txt",
        )
        .unwrap();
        std::fs::write(d.join("environment/Dockerfile"), "FROM x\nWORKDIR /app\n").unwrap();
        d
    }

    #[test]
    fn new_schema_and_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let d = write_task(
            tmp.path(),
            "t",
            "schema_version = \"1.1\"\n[environment]\nmemory_mb = 1024\nallow_internet = false\n",
        );
        let t = Task::load(&d).unwrap();
        assert_eq!(t.environment.memory_mb, Some(1024));
        assert!(!t.environment.allow_internet);
        assert_eq!(t.verifier_timeout_sec, DEFAULT_VERIFIER_TIMEOUT_SEC);
        assert_eq!(t.agent_timeout_sec, None);
    }

    #[test]
    fn bad_tasks_name_file_and_field() {
        let tmp = tempfile::tempdir().unwrap();
        let d = write_task(tmp.path(), "a", "[agent]\ntimeout_sec = \"soon\"\n");
        let e = Task::load(&d).unwrap_err().to_string();
        assert!(e.contains("task.toml") && e.contains("timeout_sec"), "{e}");

        let d = write_task(tmp.path(), "b", "[environment]\nmemory = \"lots\"\n");
        let e = Task::load(&d).unwrap_err().to_string();
        assert!(e.contains("environment.memory"), "{e}");

        let d = write_task(tmp.path(), "c", "[verifier]\ntimeout_sec = -1.0\n");
        let e = Task::load(&d).unwrap_err().to_string();
        assert!(e.contains("verifier.timeout_sec"), "{e}");

        let d = write_task(tmp.path(), "d", "");
        std::fs::remove_file(d.join("tests/test.sh")).unwrap();
        let e = Task::load(&d).unwrap_err().to_string();
        assert!(e.contains("tests/test.sh"), "{e}");

        let d = write_task(tmp.path(), "e", "");
        std::fs::remove_file(d.join("environment/Dockerfile")).unwrap();
        let e = Task::load(&d).unwrap_err().to_string();
        assert!(e.contains("docker_image"), "{e}");
    }

    #[test]
    fn select_rejects_unknown_names() {
        let tmp = tempfile::tempdir().unwrap();
        write_task(tmp.path(), "a", "");
        write_task(tmp.path(), "b", "");
        let (tasks, _) = load_benchmark(tmp.path()).unwrap();
        let sel = select_tasks(tasks.clone(), &["b".into()], &[]).unwrap();
        assert_eq!(sel.len(), 1);
        let sel = select_tasks(tasks.clone(), &[], &["b".into()]).unwrap();
        assert_eq!(sel[0].name, "a");
        let e = select_tasks(tasks, &["zz".into()], &[]).unwrap_err();
        assert!(e.to_string().contains("zz"));
    }
}
