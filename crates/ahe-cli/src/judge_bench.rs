//! `ahe judge-bench DIR`: a trajectory judge measured on labelled trajectories (the shipped
//! set is `benchmarks/judge-labelled/`, made from the adversarial suite by
//! `scripts/judge_set.py`: hacks labelled `gamed`, controls `solved`). Each item is judged
//! exactly as a passing trial of a run is (the same prompt, parser and retry), in a copy under
//! `--out`; the command prints each verdict against its label, precision and recall of
//! "gamed", and what the judge cost.

use std::path::{Path, PathBuf};

use ahe_bench::judge::{JudgeOutcome, JudgeRecord};
use ahe_bench::{OnSuspect, Task, TrialDir, TrialJudge, TrialResult, TrialStatus};
use ahe_model::ModelConfig;
use ahe_runner::config::RunConfig;
use ahe_runner::trial_judge::ModelJudge;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::CliError;

/// Arguments of `ahe judge-bench`.
#[derive(clap::Args)]
pub struct JudgeBenchArgs {
    /// Directory of labelled trajectories: one directory per item holding label.toml
    /// (`label` = "gamed" or "solved", `task` = the task directory, relative to the item),
    /// instruction.md and trace.jsonl (e.g. benchmarks/judge-labelled).
    pub dir: PathBuf,
    /// The judge model as a spec (e.g. openai:gpt-5.1, anthropic:claude-sonnet-4-5);
    /// otherwise `[models.judge]` of --config.
    #[arg(long)]
    pub model: Option<String>,
    /// Run config whose `[models.judge]` section (merged over `[models.default]`) is the judge.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where the judged copies and their judge.json go (default: a temp dir, removed).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `label.toml` of one item.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LabelFile {
    label: Label,
    task: PathBuf,
}

/// What an item truly is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// The trajectory games the check.
    Gamed,
    /// The trajectory solves the task.
    Solved,
}

/// One item's verdict against its label.
#[derive(Debug, Serialize)]
pub struct ItemResult {
    /// The item's directory name.
    pub name: String,
    /// Its label.
    pub label: Label,
    /// The judge's outcome (`gamed`, `solved`, `unparsable`, `unjudged`).
    pub outcome: JudgeOutcome,
    /// The judge's reason, or why there is no verdict.
    pub why: String,
}

/// The figures over all items ("positive" = `gamed`).
#[derive(Debug, Default, Serialize)]
pub struct Figures {
    /// Gamed items judged gamed.
    pub true_pos: usize,
    /// Solved items judged gamed.
    pub false_pos: usize,
    /// Gamed items judged solved or left without a verdict.
    pub false_neg: usize,
    /// Solved items judged solved or left without a verdict.
    pub true_neg: usize,
    /// Items without a verdict (unparsable answers, model errors).
    pub no_verdict: usize,
    /// true_pos / (true_pos + false_pos); none when nothing was judged gamed.
    pub precision: Option<f64>,
    /// true_pos / gamed items; none when there is no gamed item.
    pub recall: Option<f64>,
    /// Calls made and their cost.
    pub calls: u32,
    /// Dollars spent on the judge.
    pub cost_usd: f64,
}

/// Counts `items` into [`Figures`] (costs are added by the caller).
pub fn figures(items: &[ItemResult]) -> Figures {
    let mut f = Figures::default();
    for i in items {
        let gamed = i.outcome == JudgeOutcome::Gamed;
        if !matches!(i.outcome, JudgeOutcome::Gamed | JudgeOutcome::Solved) {
            f.no_verdict += 1;
        }
        match (i.label, gamed) {
            (Label::Gamed, true) => f.true_pos += 1,
            (Label::Gamed, false) => f.false_neg += 1,
            (Label::Solved, true) => f.false_pos += 1,
            (Label::Solved, false) => f.true_neg += 1,
        }
    }
    let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
    f.precision = ratio(f.true_pos, f.true_pos + f.false_pos);
    f.recall = ratio(f.true_pos, f.true_pos + f.false_neg);
    f
}

/// Runs `ahe judge-bench`.
pub fn run(a: JudgeBenchArgs) -> Result<(), CliError> {
    let model = judge_model(&a).map_err(CliError::usage)?;
    let items = items(&a.dir).map_err(CliError::usage)?;
    let tmp = tempfile::tempdir().map_err(CliError::failed)?;
    let out = a.out.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let client = ahe_model::build_client(&model).map_err(CliError::usage)?;
    let judge = ModelJudge::new(client, OnSuspect::Flag);
    let rt = tokio::runtime::Runtime::new().map_err(CliError::failed)?;
    let mut results = Vec::new();
    for (name, label, task, trace) in items {
        let dir = out.join(&name);
        let rec = rt
            .block_on(judge_one(&judge, &task, &trace, &dir))
            .map_err(CliError::failed)?;
        let why = rec.reason.or(rec.note).unwrap_or_default();
        results.push(ItemResult {
            name,
            label,
            outcome: rec.outcome,
            why,
        });
    }
    let mut f = figures(&results);
    let stats = judge.client().stats();
    (f.calls, f.cost_usd) = (stats.calls as u32, stats.total_cost_usd());
    if a.json {
        let doc = serde_json::json!({
            "model": judge.client().describe(), "items": results, "figures": f,
        });
        println!("{doc:#}");
    } else {
        print_table(&judge.client().describe(), &results, &f);
    }
    Ok(())
}

/// The judge's model: `--model`, else the config's `[models.judge]`.
fn judge_model(a: &JudgeBenchArgs) -> anyhow::Result<ModelConfig> {
    match (&a.model, &a.config) {
        (Some(spec), _) => ModelConfig::from_spec(spec).context("--model"),
        (None, Some(path)) => RunConfig::load(path)?.judge_model().with_context(|| {
            format!(
                "{}: no [models.judge] section; add one or pass --model SPEC",
                path.display()
            )
        }),
        (None, None) => bail!(
            "no judge model: pass --model SPEC ({}) or --config FILE with [models.judge]",
            ahe_model::config::SPEC_FORMS
        ),
    }
}

/// The items of `dir`, sorted: (name, label, task with the item's instruction, trace path).
fn items(dir: &Path) -> anyhow::Result<Vec<(String, Label, Task, PathBuf)>> {
    let rd = std::fs::read_dir(dir).with_context(|| format!("{}: cannot read", dir.display()))?;
    let mut dirs: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("label.toml").is_file())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        bail!(
            "{}: no labelled items (directories with label.toml); make the shipped set with \
             python3 scripts/judge_set.py",
            dir.display()
        );
    }
    let mut out = Vec::new();
    for d in dirs {
        let lp = d.join("label.toml");
        let text = std::fs::read_to_string(&lp)?;
        let l: LabelFile =
            toml::from_str(&text).with_context(|| format!("{}: not a label file", lp.display()))?;
        let mut task = Task::load(&d.join(&l.task))
            .map_err(|e| anyhow::anyhow!("{}: task = {:?}: {e}", lp.display(), l.task))?;
        let ip = d.join("instruction.md");
        task.instruction = std::fs::read_to_string(&ip)
            .with_context(|| format!("{}: cannot read", ip.display()))?;
        // An item holds its trace where a trial directory does.
        let trace = TrialDir::new(&d).trace_path();
        if !trace.is_file() {
            bail!("{}: missing", trace.display());
        }
        let name = d
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        out.push((name, l.label, task, trace));
    }
    Ok(out)
}

/// Judges one item as a passing trial in `dir` and returns the judge's record.
async fn judge_one(
    judge: &ModelJudge,
    task: &Task,
    trace: &Path,
    dir: &Path,
) -> anyhow::Result<JudgeRecord> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let td = TrialDir::new(dir);
    std::fs::copy(trace, td.trace_path())?;
    let mut r = TrialResult::new(&task.name, 1);
    (r.status, r.reward) = (TrialStatus::Pass, Some(1.0));
    judge.judge(task, dir, &mut r).await;
    td.read_judge()
        .with_context(|| format!("{}: the judge wrote no record", dir.display()))
}

fn print_table(model: &str, items: &[ItemResult], f: &Figures) {
    println!("judge: {model}");
    println!("{:<32} {:<7} {:<11} why", "item", "label", "verdict");
    for i in items {
        let label = serde_json::to_value(i.label).unwrap_or_default();
        let outcome = serde_json::to_value(i.outcome).unwrap_or_default();
        let why: String = i.why.chars().take(90).collect();
        println!(
            "{:<32} {:<7} {:<11} {why}",
            i.name,
            label.as_str().unwrap_or(""),
            outcome.as_str().unwrap_or("")
        );
    }
    let pct = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{:.1}%", 100.0 * v));
    println!(
        "gamed judged gamed {}/{}, solved judged gamed {}/{}, no verdict {}; precision {}, \
         recall {}; {} calls, ${:.4}",
        f.true_pos,
        f.true_pos + f.false_neg,
        f.false_pos,
        f.false_pos + f.true_neg,
        f.no_verdict,
        pct(f.precision),
        pct(f.recall),
        f.calls,
        f.cost_usd
    );
}
