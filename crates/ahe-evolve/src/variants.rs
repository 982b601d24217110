//! Variants per iteration (`[evolve] variants = N > 1`): N evolve agents work one after the
//! other from the same evidence, each from the same start (the evaluated harness after the
//! automatic rollbacks) with its own jail and optional steering (`variant_focus`,
//! `templates/variant_focus.md`); each change set passes validation and the leak guard as
//! usual and is committed on its own (tag `iter-NNN-v<i>`, HEAD does not move). A screen
//! minibatch (`screen_tasks`: failing and passing visible tasks, a seeded sample) runs one
//! trial per task of each variant as extra trial set `screen/v<i>`; the best (clean passes,
//! ties to fewer changes, then the lower number) becomes the iteration's evolve step; the
//! others stay as tags, recorded in `evolve/variants.json`. A finished variant
//! (`evolve/variants/v<i>/result.json`) and every finished screen trial (journaled) are kept
//! by a resumed run.

use std::collections::BTreeSet;

use ahe_bench::{TaskStatus, TrialStatus};
use minijinja::context;
use tokio_util::sync::CancellationToken;

use crate::evolve::{EvolveInputs, EvolveOutcome};
use crate::run::Run;
use crate::run_dir::IterationDir;
use crate::{read_json, write_json};

const FOCUS: &str = include_str!("../templates/variant_focus.md");

pub use ahe_rundir::variants::{Screened, VariantResult, VariantsRecord};

/// The screen minibatch of iteration `it`: up to `n` visible tasks, failing ones first (the
/// changes aim at them), then passing ones (they guard against harm), each group in a
/// seeded order (task name and iteration), infrastructure-only tasks left out.
pub fn screen_set(it: &IterationDir, visible: &BTreeSet<String>, n: usize) -> Vec<String> {
    let Ok(s) = it.scores() else {
        return Vec::new();
    };
    let key = |task: &str| {
        let mut h: u64 = 1469598103934665603 ^ u64::from(it.number());
        for b in task.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(1099511628211);
        }
        h
    };
    let group = |st: TaskStatus| {
        let mut v: Vec<&String> = visible
            .iter()
            .filter(|t| s.scores.tasks.get(*t).is_some_and(|x| x.status == st))
            .collect();
        v.sort_by_key(|t| key(t));
        v
    };
    let (fail, pass) = (group(TaskStatus::Fail), group(TaskStatus::Pass));
    let half = n.div_ceil(2).min(fail.len());
    let mut out: Vec<String> = fail[..half].iter().map(|t| t.to_string()).collect();
    out.extend(pass.iter().take(n - half).map(|t| t.to_string()));
    out.extend(
        fail[half..]
            .iter()
            .take(n - out.len())
            .map(|t| t.to_string()),
    );
    out
}

/// The steering text of variant `v` of `n` (`focus` cycled over the variants).
fn focus_text(v: u32, n: u32, focus: &str) -> String {
    crate::text::render(FOCUS, context! { variant => v, variants => n, focus })
}

/// Moves the evolve agent's files from `evolve/` into `to` (or back with `back`).
fn move_files(it: &IterationDir, to: &std::path::Path, back: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for f in it.evolve_agent_files() {
        let name = f.file_name().map(|n| to.join(n)).unwrap_or_default();
        let (from, dest) = if back { (name, f) } else { (f, name) };
        if back {
            let _ = std::fs::remove_file(&dest);
            if from.is_file() {
                std::fs::copy(&from, &dest)?;
            }
        } else if from.is_file() {
            std::fs::rename(&from, &dest)?;
        }
    }
    Ok(())
}

/// Runs variant `v` from `start` (or reads it back when it finished before a resume).
async fn variant(
    run: &Run,
    it: &IterationDir,
    base: &EvolveInputs<'_>,
    start: &str,
    v: u32,
) -> anyhow::Result<VariantResult> {
    let dir = it.variant_dir(v);
    let done = dir.join("result.json");
    if let Ok(r) = read_json::<VariantResult>(&done) {
        return Ok(r);
    }
    let ec = &run.cfg.evolve;
    let focus = match ec.variant_focus.len() {
        0 => String::new(),
        n => ec.variant_focus[(v as usize - 1) % n].clone(),
    };
    run.repo.reset_worktree(start)?;
    for f in it.evolve_agent_files() {
        let _ = std::fs::remove_file(f);
    }
    let mut inp = base.clone();
    let text = focus_text(v, ec.variants, &focus);
    inp.prompt = context! { variant_text => text, ..base.prompt.clone() };
    let out = crate::evolve::evolve(inp).await?;
    let tree = run.repo.snapshot_worktree()?;
    let tag = format!("{}-v{v}", crate::commit::iter_tag(it.number()));
    let msg = format!(
        "{tag}: variant {v} ({} change(s))",
        out.manifest.changes.len()
    );
    let commit = run.repo.commit_tree(&tree, start, &msg)?;
    run.repo.set_tag(&tag, &commit)?;
    move_files(it, &dir, false)?;
    let r = VariantResult {
        variant: v,
        focus,
        commit,
        tag,
        manifest: out.manifest,
        changed_files: out.changed_files,
        notes: out.notes,
        usage: out.usage,
        cost_usd: out.cost_usd,
    };
    write_json(&done, &r)?;
    Ok(r)
}

/// The evolve step with `[evolve] variants` agents: each variant, the screen, the choice;
/// leaves the chosen variant's harness in the working tree and its files in `evolve/`.
pub async fn evolve_variants(
    run: &Run,
    it: &IterationDir,
    base: EvolveInputs<'_>,
    start_tree: &str,
    cancel: CancellationToken,
) -> anyhow::Result<EvolveOutcome> {
    let n = run.cfg.evolve.variants;
    let start = match run.repo.tree_of(base.evaluated)? == start_tree {
        true => base.evaluated.to_string(),
        false => run
            .repo
            .commit_tree(start_tree, base.evaluated, "variants: start")?,
    };
    let mut results = Vec::new();
    for v in 1..=n {
        results.push(variant(run, it, &base, &start, v).await?);
    }
    let tasks = screen_set(it, base.visible, run.cfg.evolve.screen_tasks);
    let mut screened = Vec::new();
    let (mut usage, mut cost) = (ahe_model::Usage::default(), 0.0);
    for r in results {
        let set = format!("screen/v{}", r.variant);
        let (trials, c) =
            crate::extra::run_set(run, it, &set, &r.commit, &tasks, 1, cancel.clone()).await?;
        usage.add(&c.usage);
        cost += c.cost_usd;
        let all: Vec<&ahe_bench::TrialResult> = trials.values().flatten().collect();
        let clean =
            |x: &&&ahe_bench::TrialResult| x.status == TrialStatus::Pass && x.suspect.is_none();
        let passed = all.iter().filter(clean).count() as u32;
        screened.push(Screened {
            result: r,
            passed,
            trials: all.len() as u32,
            chosen: false,
        });
    }
    // Recorded every time (a resumed screen's earlier trials are in its sets on disk).
    it.record_role_cost("screen", &usage, cost)?;
    let best = (0..screened.len())
        .min_by_key(|&i| {
            let s = &screened[i];
            (
                std::cmp::Reverse(s.passed),
                s.result.changes(),
                s.result.variant,
            )
        })
        .unwrap_or(0);
    screened[best].chosen = true;
    let chosen = screened[best].result.clone();
    run.repo.reset_worktree(&chosen.commit)?;
    move_files(it, &it.variant_dir(chosen.variant), true)?;
    let figures: Vec<String> = screened
        .iter()
        .map(|s| {
            format!(
                "v{}{} {}/{} ({} change(s)){}",
                s.result.variant,
                match s.result.focus.as_str() {
                    "" => String::new(),
                    f => format!(" [{f}]"),
                },
                s.passed,
                s.trials,
                s.result.changes(),
                if s.chosen { " chosen" } else { "" }
            )
        })
        .collect();
    let mut notes = chosen.notes.clone();
    notes.push(format!(
        "variants: screen on {} (one trial per task and variant): {}; the others stay as tags {}",
        tasks.join(", "),
        figures.join(", "),
        screened
            .iter()
            .filter(|s| !s.chosen)
            .map(|s| s.result.tag.clone())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let (mut e_usage, mut e_cost) = (ahe_model::Usage::default(), 0.0);
    for s in &screened {
        e_usage.add(&s.result.usage);
        e_cost += s.result.cost_usd;
    }
    let record = VariantsRecord {
        screen_tasks: tasks,
        variants: screened,
        screen_cost_usd: cost,
    };
    write_json(&it.variants_path(), &record)?;
    Ok(EvolveOutcome {
        manifest: chosen.manifest,
        changed_files: chosen.changed_files,
        notes,
        usage: e_usage,
        cost_usd: e_cost,
    })
}
