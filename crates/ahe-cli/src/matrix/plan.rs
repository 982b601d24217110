//! The matrix's plan: its harnesses, benchmarks and models (from flags or a matrix file),
//! each resolved, validated and given an identity, and the cells they span.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ahe_model::ModelConfig;
use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `--ablate`: which generated harnesses join the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Ablate {
    /// One harness per component type with that type's changes removed from the evolved one.
    Components,
    /// One harness per component type adding only that type's changes to the base.
    AddOne,
}

/// A matrix file (`ahe matrix --config FILE`); flags given on the command line add to it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixFile {
    /// A run config for the sandbox, agent limits, verifier policy, k and budget.
    pub run_config: Option<PathBuf>,
    /// Harnesses: directories, `runs/NAME@REF`.
    #[serde(default)]
    pub harnesses: Vec<String>,
    /// Benchmarks: directories or fetch specs.
    #[serde(default)]
    pub benchmarks: Vec<String>,
    /// Models: a spec (`mock:oracle`, `openai:gpt-5.4`) or the name of a `[models.NAME]`
    /// section of this file.
    #[serde(default)]
    pub models: Vec<String>,
    /// Model sections named by `models`.
    #[serde(default)]
    pub model: BTreeMap<String, ModelConfig>,
    /// Trials per task and cell.
    pub k: Option<u32>,
    /// Ablations to generate.
    pub ablate: Option<Ablate>,
    /// The base the ablations compare with (default: the evolved run's seed).
    pub base: Option<String>,
    /// Output directory.
    pub out: Option<PathBuf>,
    /// Trials at once, over all cells.
    pub concurrency: Option<usize>,
}

impl MatrixFile {
    /// Reads a matrix file; relative paths in it are taken from the current directory, as
    /// on the command line.
    pub fn load(path: &Path) -> anyhow::Result<MatrixFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the matrix file {}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
    }
}

/// One harness of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct HarnessEntry {
    /// As given (or generated: `runs/x@best -memory`).
    pub label: String,
    /// The directory the trials load it from.
    pub dir: PathBuf,
    /// Commit id (`runs/NAME@REF`) or content hash of the directory.
    pub identity: String,
    /// The run it came from, when `runs/NAME@REF`.
    pub run: Option<PathBuf>,
    /// Held-out tasks of that run (marked in the report).
    pub holdout: BTreeSet<String>,
    /// For a generated ablation: (component type, "without" | "only").
    pub ablation: Option<(String, String)>,
    /// Why it does not validate (its cells are reported, not run).
    pub invalid: Option<String>,
}

/// One benchmark of the matrix.
#[derive(Debug, Clone)]
pub struct BenchEntry {
    /// As given.
    pub label: String,
    /// Its tasks.
    pub tasks: Vec<ahe_bench::Task>,
}

/// One model of the matrix.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// As given.
    pub label: String,
    /// Its settings.
    pub cfg: ModelConfig,
}

/// A directory-safe name: letters, digits and `-_.@`; the rest becomes `_`.
pub fn slug(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    out.trim_start_matches('.').to_string()
}

/// A content hash of a harness directory (relative paths and bytes, `.git` skipped).
pub fn content_hash(dir: &Path) -> anyhow::Result<String> {
    let mut h = Sha256::new();
    for rel in files(dir)? {
        h.update(rel.as_bytes());
        h.update([0]);
        h.update(std::fs::read(dir.join(&rel))?);
        h.update([0]);
    }
    Ok(format!("{:x}", h.finalize())[..16].to_string())
}

/// Relative paths of the files under `dir`, sorted (`.git` skipped).
pub fn files(dir: &Path) -> anyhow::Result<Vec<String>> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<String>) -> anyhow::Result<()> {
        for e in std::fs::read_dir(d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            if e.file_name() == ".git" {
                continue;
            }
            let p = e.path();
            if e.file_type()?.is_dir() {
                walk(root, &p, out)?;
            } else {
                out.push(p.strip_prefix(root)?.to_string_lossy().into_owned());
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// The held-out tasks of a run (from its first iteration's record; empty if none).
pub fn holdout_of(run: &Path) -> BTreeSet<String> {
    ahe_rundir::RunDir::new(run)
        .iteration(1)
        .scores()
        .ok()
        .and_then(|s| s.record.holdout_tasks)
        .unwrap_or_default()
}

/// Resolves the models: a `[model.NAME]` section of the matrix file, or a spec.
pub fn models(
    labels: &[String],
    sections: &BTreeMap<String, ModelConfig>,
) -> anyhow::Result<Vec<ModelEntry>> {
    if labels.is_empty() {
        bail!("no model: pass --model SPEC (repeatable) or list `models` in the matrix file");
    }
    labels
        .iter()
        .map(|l| {
            let cfg = match sections.get(l) {
                Some(c) => c.clone(),
                None => ModelConfig::from_spec(l).with_context(|| format!("--model {l}"))?,
            };
            cfg.validate().with_context(|| format!("model {l}"))?;
            Ok(ModelEntry {
                label: l.clone(),
                cfg,
            })
        })
        .collect()
}

/// Loads the benchmarks (every task must load).
pub fn benchmarks(labels: &[String]) -> anyhow::Result<Vec<BenchEntry>> {
    if labels.is_empty() {
        bail!("no benchmark: pass --benchmark DIR|SPEC (repeatable)");
    }
    labels
        .iter()
        .map(|l| {
            let (tasks, errors) = ahe_bench::load_benchmark(Path::new(l))?;
            if !errors.is_empty() {
                let list: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
                bail!("benchmark {l} has invalid tasks:\n{}", list.join("\n"));
            }
            Ok(BenchEntry {
                label: l.clone(),
                tasks,
            })
        })
        .collect()
}

/// A cell: one harness on one benchmark with one model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CellKey {
    /// Harness label.
    pub harness: String,
    /// Benchmark label.
    pub benchmark: String,
    /// Model label.
    pub model: String,
    /// Harness identity (commit or content hash).
    pub harness_identity: String,
    /// The model as described by its provider.
    pub model_describe: String,
    /// Trials per task.
    pub k: u32,
    /// The tasks.
    pub tasks: Vec<String>,
}

impl CellKey {
    /// The cell's directory name under `cells/`.
    pub fn dir_name(&self) -> String {
        format!(
            "{}__{}__{}",
            slug(&self.harness),
            slug(&self.benchmark),
            slug(&self.model)
        )
    }
}
