//! Starting and resuming runs: the run directory, frozen config, tasks, repository, journal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};

use crate::inputs::lock::{in_use, RunLock};
use crate::inputs::run::Run;
use ahe_rundir::journal::Journal;
use ahe_rundir::run_dir::RunDir;
use ahe_runner::config::RunConfig;
use ahe_runner::holdout::split_holdout;
use ahe_runner::repo::HarnessRepo;

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
    // A fetch SPEC (`terminal-bench@2.0`, `git+URL`) is not a path.
    if !ahe_bench::fetch::is_spec(&cfg.benchmark.path.to_string_lossy()) {
        cfg.benchmark.path = abs(&cfg.benchmark.path);
    }
    for m in cfg.models.values_mut() {
        if let Some(s) = &m.script {
            m.script = Some(abs(s));
        }
        if let Some(c) = &m.cache_dir {
            m.cache_dir = Some(abs(c));
        }
    }
}

/// What a run needs besides its directory: tasks, the holdout split and the backend,
/// checked in full before anything is written.
struct Prepared {
    tasks: Vec<ahe_bench::Task>,
    visible: std::collections::BTreeSet<String>,
    holdout: std::collections::BTreeSet<String>,
    backend: Arc<dyn ahe_sandbox::Backend>,
}

fn prepare(cfg: &RunConfig) -> anyhow::Result<Prepared> {
    let (tasks, errors) = ahe_bench::load_benchmark(&cfg.benchmark.path)
        .with_context(|| format!("benchmark.path = {:?}", cfg.benchmark.path.display()))?;
    if let Some(e) = errors.first() {
        bail!("benchmark {}: {e}", cfg.benchmark.path.display());
    }
    let tasks = ahe_bench::select_tasks(tasks, &cfg.benchmark.include, &cfg.benchmark.exclude)?;
    let (visible, holdout) = split_holdout(cfg, &tasks)?;
    let backend = ahe_runner::rollout::select_backend_on(
        &cfg.sandbox.backend,
        cfg.sandbox.pull,
        &cfg.sandbox.hosts,
        cfg.sandbox.harbor.as_ref(),
    )?;
    Ok(Prepared {
        tasks,
        visible,
        holdout,
        backend,
    })
}

fn open_run(
    dir: &Path,
    cfg: RunConfig,
    repo: HarnessRepo,
    prepared: Prepared,
    lock: RunLock,
    progress: Arc<dyn Fn(ahe_bench::Progress) + Send + Sync>,
) -> anyhow::Result<Run> {
    let rd = RunDir::new(dir);
    let budget = crate::inputs::run::run_budget(&cfg, &rd);
    Ok(Run {
        journal: Journal::open(&rd.journal_path())?,
        dir: rd,
        cfg,
        tasks: prepared.tasks,
        visible: prepared.visible,
        holdout: prepared.holdout,
        repo,
        backend: prepared.backend,
        progress,
        budget,
        lock,
    })
}

/// Creates `runs_root/<name>/` for a new run and returns it ready to execute (and locked).
/// The config, seed harness and benchmark are checked first: a config that fails creates
/// nothing, so the name stays free.
pub fn start(
    cfg_path: &Path,
    name: Option<String>,
    iterations: Option<u32>,
    runs_root: &Path,
    progress: Arc<dyn Fn(ahe_bench::Progress) + Send + Sync>,
) -> anyhow::Result<Run> {
    start_overridden(
        cfg_path,
        name,
        |cfg| {
            if let Some(n) = iterations {
                cfg.iterations = n;
            }
        },
        runs_root,
        progress,
    )
}

/// [`start`] with command-line overrides applied to the loaded config (before it is frozen).
pub fn start_overridden(
    cfg_path: &Path,
    name: Option<String>,
    overrides: impl FnOnce(&mut RunConfig),
    runs_root: &Path,
    progress: Arc<dyn Fn(ahe_bench::Progress) + Send + Sync>,
) -> anyhow::Result<Run> {
    let mut cfg = RunConfig::load(cfg_path)?;
    overrides(&mut cfg);
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
    let exists = || {
        if let Some(pid) = RunLock::holder(&dir) {
            anyhow::anyhow!("{}", in_use(&dir, &pid))
        } else {
            anyhow::anyhow!(
                "{} exists; continue it with `ahe evolve --resume {}` or pick another --name",
                dir.display(),
                dir.display()
            )
        }
    };
    if dir.exists() {
        return Err(exists());
    }
    if let Err(p) = ahe_harness::load(&cfg.harness) {
        let list: Vec<String> = p.iter().map(|x| x.to_string()).collect();
        bail!(
            "seed harness {} is invalid:\n  {}",
            cfg.harness.display(),
            list.join("\n  ")
        );
    }
    let prepared = prepare(&cfg).with_context(|| format!("{}", cfg_path.display()))?;
    std::fs::create_dir_all(runs_root)
        .with_context(|| format!("creating {}", runs_root.display()))?;
    if std::fs::create_dir(&dir).is_err() {
        return Err(exists());
    }
    let lock = match RunLock::acquire(&dir) {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let created = (|| {
        let frozen = format!(
            "# Frozen, fully merged config of this run (from {}). No secrets: API keys are only named.\n{}",
            cfg_path.display(),
            toml::to_string(&cfg)?
        );
        let rd = RunDir::new(&dir);
        std::fs::write(rd.config_path(), frozen)?;
        HarnessRepo::init(&rd.harness_repo(), &cfg.harness)
    })();
    match created {
        Ok(repo) => open_run(&dir, cfg, repo, prepared, lock, progress),
        Err(e) => {
            drop(lock);
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// Reopens an interrupted run from its directory.
pub fn resume(
    dir: &Path,
    progress: Arc<dyn Fn(ahe_bench::Progress) + Send + Sync>,
) -> anyhow::Result<Run> {
    let rd = RunDir::new(dir);
    let text = std::fs::read_to_string(rd.config_path())
        .with_context(|| format!("{}: not a run directory (no run.toml)", dir.display()))?;
    let cfg: RunConfig = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", rd.config_path().display()))?;
    let lock = RunLock::acquire(dir)?;
    // A run killed in the middle of a git write (kill -9, power loss) leaves its lock files;
    // holding the run lock, we are the repository's only writer, so they are stale.
    for stale in HarnessRepo::clear_stale_locks(&rd.harness_repo())? {
        eprintln!("ahe: removed {} (left by the killed run)", stale.display());
    }
    let repo = match HarnessRepo::open(&rd.harness_repo()) {
        Ok(r) if r.has_tag(&ahe_runner::repo::iter_tag(0)) => {
            // Killed after tagging the seed but before its branch was written (seen under
            // load): finishing the idempotent seed commit points the branch at the tag.
            if r.head().is_err() {
                r.commit_all("iter-000: seed harness", &ahe_runner::repo::iter_tag(0))
                    .context("finishing the seed commit of the killed run")?;
            }
            r
        }
        // Killed while the run was being created (before the seed's commit): no iteration
        // can have run yet, so the repository is made again from the frozen config's seed.
        _ => {
            let dir = rd.harness_repo();
            if dir.exists() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("removing the unfinished {}", dir.display()))?;
            }
            HarnessRepo::init(&dir, &cfg.harness)
                .with_context(|| format!("recreating {} from the seed harness", dir.display()))?
        }
    };
    let prepared = prepare(&cfg).with_context(|| format!("{}", rd.config_path().display()))?;
    open_run(dir, cfg, repo, prepared, lock, progress)
}
