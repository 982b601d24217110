//! Run configuration (`configs/*.toml`): `extends` layering, `${ENV}` substitution, strict keys.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ahe_model::ModelConfig;
use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

mod load;
use load::{layer_roles, load_layered};

/// A fully merged run configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Run name (default: derived from the config file name).
    #[serde(default)]
    pub name: Option<String>,
    /// Trials per task.
    #[serde(default = "default_k")]
    pub k: u32,
    /// Evolve iterations.
    #[serde(default = "default_iterations")]
    pub iterations: u32,
    /// The seed harness directory.
    #[serde(default = "default_harness")]
    pub harness: PathBuf,
    /// Benchmark selection.
    pub benchmark: BenchmarkConfig,
    /// Sandbox settings.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// Agent defaults.
    #[serde(default)]
    pub agent: AgentConfig,
    /// The verifier hand-over: `leftover_processes = "keep_servers" | "kill"`,
    /// `service_start_secs` (default 30), `on_suspect = "flag" | "fail"`.
    #[serde(default)]
    pub verifier: ahe_bench::VerifierPolicy,
    /// Evolve-loop settings.
    #[serde(default)]
    pub evolve: EvolveConfig,
    /// Held-out tasks: scored every iteration, never shown to the debugger or evolve agent.
    #[serde(default)]
    pub holdout: HoldoutConfig,
    /// Evidence beyond the rollout: confirmation trials, counterfactuals, the canary.
    #[serde(default)]
    pub attribution: AttributionConfig,
    /// Models: `default` plus optional per-role overrides `code_agent`, `debugger`, `evolve`
    /// (each merged over `default`), and the optional trajectory judge `judge` (off unless
    /// its section is there).
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
}

fn default_k() -> u32 {
    1
}
fn default_iterations() -> u32 {
    3
}
fn default_harness() -> PathBuf {
    "harness-seed".into()
}

/// `[benchmark]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkConfig {
    /// Benchmark directory.
    pub path: PathBuf,
    /// Only these tasks (all when empty).
    #[serde(default)]
    pub include: Vec<String>,
    /// Minus these tasks.
    #[serde(default)]
    pub exclude: Vec<String>,
}

/// `[sandbox]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// `auto`, `docker`, `local` or `harbor`.
    #[serde(default = "default_backend")]
    pub backend: String,
    /// Trials running at once; `"auto"` sizes it from this machine (see [`auto_concurrency`]).
    #[serde(
        default = "default_concurrency",
        deserialize_with = "concurrency_or_auto"
    )]
    pub concurrency: usize,
    /// Retries of a trial that hit an infra error.
    #[serde(default = "default_infra_retries")]
    pub infra_retries: u32,
    /// When the docker backend pulls images: `missing` (default), `always` or `never`.
    #[serde(default)]
    pub pull: ahe_sandbox::PullPolicy,
    /// Several Docker engines, each with its capacity (`hosts = [{url = "unix:///…",
    /// capacity = 4}, {url = "tcp://…:2376", capacity = 8, tls = {ca, cert, key}}]`); trials
    /// go to the least-loaded one that answers. Empty: the one engine of `DOCKER_HOST`.
    /// Without an explicit `concurrency`, the run's concurrency is the sum of the capacities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<ahe_sandbox::docker::HostSpec>,
    /// Host reserve in bytes (`"4G"`, `"500M"`, or 0 to turn it off): below this much free
    /// space on the run directory's or the sandboxes' file system no trial starts and the
    /// largest running one is stopped (re-run later).
    #[serde(default = "default_min_free_disk", deserialize_with = "size_or_bytes")]
    pub min_free_disk: u64,
    /// `[sandbox.harbor]` of `backend = "harbor"`: the Harbor environment (`environment =
    /// "docker"`, ...), its `options` (passed through) and the `venv` running the bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harbor: Option<ahe_sandbox::harbor::HarborConfig>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            backend: default_backend(),
            concurrency: default_concurrency(),
            infra_retries: default_infra_retries(),
            pull: Default::default(),
            hosts: Vec::new(),
            min_free_disk: default_min_free_disk(),
            harbor: None,
        }
    }
}

fn default_min_free_disk() -> u64 {
    ahe_bench::disk::DEFAULT_MIN_FREE
}

/// `min_free_disk = "4G"` or a number of bytes.
fn size_or_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum S {
        N(u64),
        S(String),
    }
    match S::deserialize(d)? {
        S::N(n) => Ok(n),
        S::S(s) => ahe_bench::disk::parse_size(&s).map_err(serde::de::Error::custom),
    }
}

fn default_backend() -> String {
    "auto".into()
}
fn default_concurrency() -> usize {
    4
}
/// Trials this machine runs at once: one per core, at most one per 4 GiB of memory (TB2 tasks
/// ask for 1–2 cores and 2–4 GiB), at least 1.
pub fn auto_concurrency() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(4, |kb| (kb >> 20) as usize);
    cores.min(mem_gib / 4).max(1)
}

/// `concurrency = N` or `concurrency = "auto"`.
fn concurrency_or_auto<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum C {
        N(usize),
        S(String),
    }
    match C::deserialize(d)? {
        C::N(n) => Ok(n),
        C::S(s) if s == "auto" => Ok(auto_concurrency()),
        C::S(s) => Err(serde::de::Error::custom(format!(
            "{s:?}: use a number of trials or \"auto\""
        ))),
    }
}

fn default_infra_retries() -> u32 {
    1
}

/// `[agent]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Agent timeout for tasks whose task.toml sets none.
    #[serde(default = "default_agent_timeout")]
    pub default_timeout_sec: f64,
    /// Caps the code agent's turns below the harness's own `max_turns` (quick runs with a
    /// slow local model); the harness files are not changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            default_timeout_sec: default_agent_timeout(),
            max_turns: None,
        }
    }
}

impl AgentConfig {
    /// Applies `max_turns` to a loaded harness.
    pub fn cap(&self, h: &mut ahe_harness::Harness) {
        if let Some(m) = self.max_turns {
            h.agent.limits.max_turns = h.agent.limits.max_turns.min(m);
        }
    }
}

fn default_agent_timeout() -> f64 {
    1800.0
}

/// `[evolve]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvolveConfig {
    /// `auto` (revert HARMFUL changes before evolving) or `agent` (report only).
    pub rollback: String,
    /// Stop gracefully once this much has been spent (all roles).
    pub budget_usd: Option<f64>,
    /// Show the tests' output to the debugger and evolve agent (default: reward only).
    pub show_verifier_output: bool,
    /// Tasks the debugger analyses at once.
    pub debugger_concurrency: usize,
    /// Per-task time limit of the debugger.
    pub debugger_timeout_sec: f64,
    /// Turn limit of the debugger.
    pub debugger_max_turns: u32,
    /// Turn limit of the evolve agent.
    pub evolve_max_turns: u32,
    /// Time limit of the evolve agent.
    pub evolve_timeout_sec: f64,
    /// Run one smoke trial of a new harness before the full rollout.
    pub preflight: bool,
    /// Largest harness file an evolve write may leave (bytes).
    pub max_file_bytes: u64,
    /// Largest total size of the harness files after an evolve write (bytes, `.git` excluded).
    pub max_harness_bytes: u64,
    /// Leak guard on the evolve agent's edits: `reject` (default), `warn` or `off`.
    pub leak_guard: ahe_rundir::leak::LeakPolicy,
    /// The cap on fresh trials per visible task of best and of the seed in the sequential
    /// final answer, one per round until it decides (unset: 2 × k; 0: no final answer).
    pub final_trials: Option<u32>,
    /// Run the matched-budget baseline (`ahe baseline`) as the run's last phase.
    pub baseline: bool,
    /// Seed trials per task the baseline runs, at most, whatever the spend buys.
    pub baseline_trials: u32,
    /// Characters of task reports one overview call reads (more: map–reduce); 0 = from the
    /// debugger model (a local model's context, else 200000).
    pub overview_context_chars: usize,
    /// Iterations shown in full in the evolve agent's `inputs/history.md` (older ones are
    /// summarised, one line per change).
    pub history_full_iterations: u32,
    /// Evolve agents per iteration, each from the same evidence on its own branch; the
    /// best on the screen is committed (1 = one agent, no screen).
    pub variants: u32,
    /// Steering of variant i (cycled): `structural`, `guidance`, or free text.
    pub variant_focus: Vec<String>,
    /// Tasks of the screen minibatch that picks among the variants.
    pub screen_tasks: usize,
    /// Variants whose evolve agents run at the same time, at most (unset: all of them).
    pub variants_concurrency: Option<u32>,
}

impl Default for EvolveConfig {
    fn default() -> Self {
        EvolveConfig {
            rollback: "auto".into(),
            budget_usd: None,
            show_verifier_output: false,
            debugger_concurrency: 4,
            debugger_timeout_sec: 600.0,
            debugger_max_turns: 30,
            evolve_max_turns: 60,
            evolve_timeout_sec: 1800.0,
            preflight: true,
            max_file_bytes: 256 * 1024,
            max_harness_bytes: 2 * 1024 * 1024,
            leak_guard: ahe_rundir::leak::LeakPolicy::Reject,
            final_trials: None,
            baseline: false,
            baseline_trials: 16,
            overview_context_chars: 0,
            history_full_iterations: 3,
            variants: 1,
            variant_focus: Vec::new(),
            screen_tasks: 4,
            variants_concurrency: None,
        }
    }
}

/// `[attribution]`: the extra trials that separate a change's real effect from luck and
/// from the other changes of its iteration (docs/attribution.md).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AttributionConfig {
    /// Extra trials of the new harness, at most, for a flip within noise (0 = none).
    pub confirm_trials: u32,
    /// Trials of each counterfactual harness (H_eval minus one change) on a task (0 = none).
    pub counterfactual_trials: u32,
    /// Tasks re-run with changes reverted per iteration, at most.
    pub max_counterfactual_tasks: usize,
    /// Confirmation + counterfactual + canary trials per iteration, at most, as a share of
    /// the rollout's trials (tasks × k).
    pub max_extra_share: f64,
    /// Roll out the canary set (risk tasks + previously passing tasks on the touched files)
    /// before the full rollout; roll back the culprit of a canary regression first.
    pub canary: bool,
    /// Tasks in the canary set, at most.
    pub canary_max_tasks: usize,
    /// Counterfactual trials an iteration may always spend on regressions of tasks that
    /// passed every earlier trial, even past `max_extra_share` (the harm floor).
    pub harm_floor_trials: u32,
    /// What `rollback = "auto"` does with an UNJUDGED change: `"revert"` or `"keep"`.
    pub unjudged: String,
}

impl Default for AttributionConfig {
    fn default() -> Self {
        AttributionConfig {
            confirm_trials: 4,
            counterfactual_trials: 2,
            max_counterfactual_tasks: 8,
            max_extra_share: 0.25,
            canary: false,
            canary_max_tasks: 8,
            harm_floor_trials: 12,
            unjudged: "revert".into(),
        }
    }
}

impl AttributionConfig {
    /// The cap on one iteration's extra trials for a rollout of `rollout_trials`.
    pub fn extra_trial_cap(&self, rollout_trials: usize) -> usize {
        (self.max_extra_share * rollout_trials as f64).floor() as usize
    }
}

/// `[holdout]`: named tasks, or a seeded random fraction of the benchmark.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HoldoutConfig {
    /// Task names held out.
    pub tasks: Vec<String>,
    /// Fraction of tasks held out at random (in addition to `tasks`).
    pub fraction: Option<f64>,
    /// Seed of the random choice.
    pub seed: u64,
}

/// The roles that name a model: the three agent roles and the optional trajectory judge
/// (`judge`: on only when `[models.judge]` is there; see [`RunConfig::judge_model`]).
pub const ROLES: [&str; 4] = ["code_agent", "debugger", "evolve", "judge"];

/// The optional role: it runs only when its own `[models.judge]` section is there.
pub const JUDGE: &str = "judge";

impl RunConfig {
    /// Loads a config file, following `extends` and substituting `${VAR}` / `${VAR:-default}`.
    pub fn load(path: &Path) -> anyhow::Result<RunConfig> {
        let mut table = load_layered(path, &mut Vec::new())?;
        layer_roles(&mut table);
        let concurrency_set = table
            .get("sandbox")
            .and_then(|s| s.get("concurrency"))
            .is_some();
        let de = toml::Value::Table(table);
        let mut cfg: RunConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let at = e.path().to_string();
            anyhow!(
                "{}: {}: {}",
                path.display(),
                if at == "." { "(top level)".into() } else { at },
                e.inner().message()
            )
        })?;
        if !concurrency_set && !cfg.sandbox.hosts.is_empty() {
            cfg.sandbox.concurrency = cfg
                .sandbox
                .hosts
                .iter()
                .map(|h| h.capacity)
                .sum::<usize>()
                .max(1);
        }
        cfg.validate()
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        Ok(cfg)
    }

    /// Checks values serde cannot (ranges, choices, model settings).
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.k == 0 {
            bail!("k: must be at least 1");
        }
        if !["auto", "docker", "local", "harbor"].contains(&self.sandbox.backend.as_str()) {
            bail!(
                "sandbox.backend: {:?} must be one of auto, docker, local, harbor",
                self.sandbox.backend
            );
        }
        self.validate_sandbox()?;
        self.validate_evolve()?;
        if self.agent.max_turns == Some(0) {
            bail!("agent.max_turns: must be at least 1");
        }
        if self.agent.default_timeout_sec.is_nan() || self.agent.default_timeout_sec <= 0.0 {
            bail!("agent.default_timeout_sec: must be positive");
        }
        if !["auto", "agent"].contains(&self.evolve.rollback.as_str()) {
            bail!(
                "evolve.rollback: {:?} must be auto or agent",
                self.evolve.rollback
            );
        }
        if let Some(f) = self.holdout.fraction {
            if !(0.0..1.0).contains(&f) {
                bail!("holdout.fraction: {f} must be in [0, 1)");
            }
        }
        if !["revert", "keep"].contains(&self.attribution.unjudged.as_str()) {
            bail!(
                "attribution.unjudged: {:?} must be revert (undo a change that may have caused \
                 an unexplained regression) or keep",
                self.attribution.unjudged
            );
        }
        let share = self.attribution.max_extra_share;
        if share.is_nan() || !(0.0..=1.0).contains(&share) {
            bail!("attribution.max_extra_share: {share} must be in [0, 1]");
        }
        for k in self.models.keys() {
            if k != "default" && !ROLES.contains(&k.as_str()) {
                bail!("models.{k}: unknown role; use models.default, models.code_agent, models.debugger, models.evolve or models.judge");
            }
        }
        for r in ROLES {
            self.model(r)
                .validate()
                .map_err(|e| anyhow!("models.{r}: {e}"))?;
        }
        Ok(())
    }

    /// `[sandbox]`: harbor settings only with the harbor backend, engines only with docker.
    fn validate_sandbox(&self) -> anyhow::Result<()> {
        if self.sandbox.harbor.is_some() && self.sandbox.backend != "harbor" {
            bail!(
                "sandbox.harbor: configures the harbor backend, but sandbox.backend = {:?}; set \
                 backend = \"harbor\", or drop [sandbox.harbor]",
                self.sandbox.backend
            );
        }
        if self.sandbox.concurrency == 0 {
            bail!("sandbox.concurrency: must be at least 1");
        }
        if !self.sandbox.hosts.is_empty() {
            if matches!(self.sandbox.backend.as_str(), "local" | "harbor") {
                bail!(
                    "sandbox.hosts: lists Docker engines, but sandbox.backend = {:?}; set \
                     backend = \"docker\" (or \"auto\"), or drop hosts",
                    self.sandbox.backend
                );
            }
            ahe_sandbox::docker::pool::validate_hosts(&self.sandbox.hosts)
                .map_err(|e| anyhow!("sandbox.{e}"))?;
        }
        Ok(())
    }

    /// `[evolve]`: variants, their concurrency and screen, the debugger's concurrency.
    fn validate_evolve(&self) -> anyhow::Result<()> {
        if self.evolve.variants == 0 {
            bail!("evolve.variants: must be at least 1 (1 = one evolve agent, no screen)");
        }
        if self.evolve.variants_concurrency == Some(0) {
            bail!(
                "evolve.variants_concurrency: must be at least 1 (leave it out to run every \
                 variant at once)"
            );
        }
        if self.evolve.variants > 1 && self.evolve.screen_tasks == 0 {
            bail!("evolve.screen_tasks: must be at least 1 when evolve.variants > 1");
        }
        if self.evolve.debugger_concurrency == 0 {
            bail!("evolve.debugger_concurrency: must be at least 1");
        }
        Ok(())
    }

    /// The trajectory judge's model: `[models.judge]` (merged over `models.default`), or
    /// none when the section is absent (the judge is off by default).
    pub fn judge_model(&self) -> Option<ModelConfig> {
        self.models.get(JUDGE).cloned()
    }

    /// The roles this config runs: the three agent roles, and `judge` when it is on.
    pub fn active_roles(&self) -> Vec<&'static str> {
        ROLES
            .into_iter()
            .filter(|r| *r != JUDGE || self.models.contains_key(JUDGE))
            .collect()
    }

    /// The model of a role: its own section, else `models.default`, else the mock nop.
    pub fn model(&self, role: &str) -> ModelConfig {
        self.models
            .get(role)
            .or_else(|| self.models.get("default"))
            .cloned()
            .unwrap_or_default()
    }
}

/// `configs/base.toml`, built in: the config `ahe debug` uses when given none.
const BASE_CONFIG: &str = include_str!("../../../configs/base.toml");

/// The shipped defaults (`configs/base.toml`) as a config.
pub fn base_config() -> anyhow::Result<RunConfig> {
    let cfg: RunConfig = toml::from_str(BASE_CONFIG).context("configs/base.toml (built in)")?;
    cfg.validate().context("configs/base.toml (built in)")?;
    Ok(cfg)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;

#[cfg(test)]
mod shipped {
    use super::*;

    #[test]
    fn every_shipped_config_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            // `*.script.toml` are mock-model scripts, not run configs.
            let script = p.to_string_lossy().ends_with(".script.toml");
            if p.extension().is_some_and(|x| x == "toml") && !script {
                RunConfig::load(&p).unwrap_or_else(|e| panic!("{e:#}"));
                n += 1;
            }
        }
        assert!(n >= 2);
    }
}
