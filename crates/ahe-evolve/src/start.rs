//! Starting and resuming runs: the run directory, frozen config, tasks, repository, journal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};

use crate::commit::HarnessRepo;
use crate::journal::Journal;
use crate::r#loop::{split_holdout, Run};
use crate::RunConfig;

/// Makes config paths absolute (so a run resumes from any directory).
fn absolutize(cfg: &mut RunConfig, base: &Path) {
    let abs = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    cfg.harness = abs(&cfg.harness);
    cfg.benchmark.path = abs(&cfg.benchmark.path);
    for m in cfg.models.values_mut() {
        if let Some(s) = &m.script {
            m.script = Some(abs(s));
        }
        if let Some(c) = &m.cache_dir {
            m.cache_dir = Some(abs(c));
        }
    }
}

fn open_run(
    dir: &Path,
    cfg: RunConfig,
    repo: HarnessRepo,
    progress: Arc<dyn Fn(ahe_bench::Progress) + Send + Sync>,
) -> anyhow::Result<Run> {
    let (tasks, errors) = ahe_bench::load_benchmark(&cfg.benchmark.path)?;
    if let Some(e) = errors.first() {
        bail!("benchmark {}: {e}", cfg.benchmark.path.display());
    }
    let tasks = ahe_bench::select_tasks(tasks, &cfg.benchmark.include, &cfg.benchmark.exclude)?;
    let (visible, holdout) = split_holdout(&cfg, &tasks)?;
    let backend = crate::select_backend(&cfg.sandbox.backend)?;
    let budget = crate::r#loop::run_budget(&cfg, dir);
    Ok(Run {
        dir: dir.to_path_buf(),
        journal: Journal::open(&dir.join("journal.jsonl"))?,
        cfg,
        tasks,
        visible,
        holdout,
        repo,
        backend,
        progress,
        budget,
    })
}

/// Creates `runs_root/<name>/` for a new run and returns it ready to execute.
pub fn start(
    cfg_path: &Path,
    name: Option<String>,
    iterations: Option<u32>,
    runs_root: &Path,
    progress: Arc<dyn Fn(ahe_bench::Progress) + Send + Sync>,
) -> anyhow::Result<Run> {
    let mut cfg = RunConfig::load(cfg_path)?;
    if let Some(n) = iterations {
        cfg.iterations = n;
    }
    let cwd = std::env::current_dir()?;
    absolutize(&mut cfg, &cwd);
    let name = name.or(cfg.name.clone()).unwrap_or_else(|| {
        let stem = cfg_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or("run".into());
        format!("{stem}-{}", chrono::Local::now().format("%Y%m%d-%H%M%S"))
    });
    cfg.name = Some(name.clone());
    let dir: PathBuf = runs_root.join(&name);
    if dir.exists() {
        bail!(
            "{} exists; continue it with `ahe evolve --resume {}` or pick another --name",
            dir.display(),
            dir.display()
        );
    }
    if let Err(p) = ahe_harness::load(&cfg.harness) {
        let list: Vec<String> = p.iter().map(|x| x.to_string()).collect();
        bail!(
            "seed harness {} is invalid:\n  {}",
            cfg.harness.display(),
            list.join("\n  ")
        );
    }
    std::fs::create_dir_all(&dir)?;
    let frozen = format!(
        "# Frozen, fully merged config of this run (from {}). No secrets: API keys are only named.\n{}",
        cfg_path.display(),
        toml::to_string(&cfg)?
    );
    std::fs::write(dir.join("run.toml"), frozen)?;
    let repo = HarnessRepo::init(&dir.join("harness"), &cfg.harness)?;
    open_run(&dir, cfg, repo, progress)
}

/// Reopens an interrupted run from its directory.
pub fn resume(
    dir: &Path,
    progress: Arc<dyn Fn(ahe_bench::Progress) + Send + Sync>,
) -> anyhow::Result<Run> {
    let text = std::fs::read_to_string(dir.join("run.toml"))
        .with_context(|| format!("{}: not a run directory (no run.toml)", dir.display()))?;
    let cfg: RunConfig = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("run.toml").display()))?;
    let repo = HarnessRepo::open(&dir.join("harness"))?;
    open_run(dir, cfg, repo, progress)
}
