//! The attribution simulation: scripted `ahe evolve` runs with a known ground truth. The mock
//! code agent solves task `sim-NN` only when the harness holds the line `FIX-KNN`, and fails
//! a task it would solve when the harness holds `BREAK-KNN`; the scripted evolve agent makes
//! the scenario's changes one `commit_change` each, some in the same file, some predicting
//! their effect and some not. Shared by `tests/cli/attribution.rs` and
//! `examples/bench_attribution.rs`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

// Also loaded by `common` in the cli binary; the example `bench_attribution` has no `common`.
#[allow(clippy::duplicate_mod)]
#[path = "../../common/within.rs"]
mod within;

/// What a change does to its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Makes a failing task pass.
    Fix,
    /// Makes a passing task fail.
    Break,
    /// Changes nothing (a lesson no rule reads).
    Nothing,
}

/// One scripted change of iteration 1.
#[derive(Debug, Clone)]
pub struct SimChange {
    /// Change id.
    pub id: String,
    /// Fix or break.
    pub effect: Effect,
    /// The task number it affects.
    pub task: u32,
    /// Whether the manifest names the task (predicted_fixes for a fix, risk_tasks for a break).
    pub predicted: bool,
    /// The harness file it edits (one of [`FILES`]).
    pub file: &'static str,
    /// At the top of the file (else at the bottom).
    pub top: bool,
    /// Further tasks a break also breaks (empty: only `task`).
    pub also: Vec<u32>,
    /// The evolve iteration that makes it (1 = the first).
    pub iteration: u32,
}

impl SimChange {
    /// A change of iteration 1 to one task.
    pub fn new(
        id: &str,
        effect: Effect,
        task: u32,
        predicted: bool,
        file: &'static str,
        top: bool,
    ) -> SimChange {
        SimChange {
            id: id.into(),
            effect,
            task,
            predicted,
            file,
            top,
            also: Vec::new(),
            iteration: 1,
        }
    }

    /// Every task it affects.
    pub fn tasks(&self) -> Vec<u32> {
        std::iter::once(self.task)
            .chain(self.also.iter().copied())
            .collect()
    }
}

/// The memory files changes go in (each seeded with neutral lines).
pub const FILES: [&str; 3] = ["memory/MEMORY.md", "memory/style.md", "memory/tips.md"];

/// A scenario: tasks `sim-01..sim-NN`; tasks named by a fix fail at first, all others pass.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Number of tasks.
    pub tasks: u32,
    /// Trials per task.
    pub k: u32,
    /// The changes, in commit order.
    pub changes: Vec<SimChange>,
    /// Run with `[attribution] canary = true`.
    pub canary: bool,
    /// More `[attribution]` lines (e.g. `harm_floor_trials = 0`).
    pub attribution: String,
    /// More `[evolve]` lines (e.g. `baseline = true`).
    pub evolve: String,
    /// Tasks the code agent never solves, whatever the harness.
    pub failing: Vec<u32>,
}

/// The task name of number `n`.
pub fn task(n: u32) -> String {
    format!("sim-{n:02}")
}

fn line(c: &SimChange) -> String {
    let tag = match c.effect {
        Effect::Fix => "FIX",
        Effect::Break => "BREAK",
        Effect::Nothing => "NOTE",
    };
    let tags: Vec<String> = c.tasks().iter().map(|t| format!("{tag}-K{t:02}")).collect();
    format!("- {}: lesson {} of the simulation.", tags.join(" "), c.id)
}

fn neutral(file: &str, i: u32) -> String {
    format!("- note {i} of {file}: keep going.")
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            tasks: 40,
            k: 2,
            changes: Vec::new(),
            canary: false,
            attribution: String::new(),
            // The final re-evaluation is tested on its own (tests/cli/honest_best.rs and a kill -9
            // test); elsewhere its 3 × 2k trials per task only slow the simulation.
            evolve: "final_trials = 0\n".into(),
            failing: Vec::new(),
        }
    }
}

impl Scenario {
    /// The fixed scenario of the test: a helpful change and an unpredicted harmful one in the
    /// same file (harmful first, so its revert is a real three-way merge), and a predicted
    /// harmful one in another file.
    pub fn standard() -> Scenario {
        let c = SimChange::new;
        Scenario {
            changes: vec![
                c("c3", Effect::Break, 6, false, FILES[0], true),
                c("c1", Effect::Fix, 1, true, FILES[0], false),
                c("c2", Effect::Break, 5, true, FILES[1], true),
            ],
            ..Default::default()
        }
    }

    /// Tasks that fail with the seed harness.
    fn fails_at_first(&self, n: u32) -> bool {
        self.changes
            .iter()
            .any(|c| c.effect == Effect::Fix && c.task == n)
    }

    /// Evolve iterations the scenario needs (its last change's, plus one to judge it).
    pub fn iterations(&self) -> u32 {
        self.changes.iter().map(|c| c.iteration).max().unwrap_or(1) + 1
    }

    /// Writes the benchmark, seed harness, mock script and config under `dir`; returns the
    /// config's path.
    pub fn write(&self, dir: &Path, root: &Path) -> PathBuf {
        let bench = dir.join("bench");
        for n in 1..=self.tasks {
            let t = bench.join(task(n));
            for sub in ["environment", "solution", "tests"] {
                std::fs::create_dir_all(t.join(sub)).unwrap();
            }
            let word = format!("out-{n:02}");
            std::fs::write(
                t.join("task.toml"),
                "schema_version = \"1.1\"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 30.0\n[environment]\ncpus = 1\nmemory_mb = 256\nallow_internet = false\n",
            )
            .unwrap();
            std::fs::write(
                t.join("instruction.md"),
                format!("Write the word `{word}` into /app/out.txt.\n"),
            )
            .unwrap();
            std::fs::write(
                t.join("environment/Dockerfile"),
                "FROM ahe-base:bookworm\nWORKDIR /app\n",
            )
            .unwrap();
            std::fs::write(
                t.join("solution/solve.sh"),
                format!("#!/bin/bash\necho {word} > /app/out.txt\n"),
            )
            .unwrap();
            std::fs::write(
                t.join("tests/test.sh"),
                format!("#!/bin/bash\nif grep -qx {word} /app/out.txt 2>/dev/null; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"),
            )
            .unwrap();
        }
        let seed = dir.join("seed");
        copy_dir(&root.join("harness-seed"), &seed);
        for f in FILES {
            let body: String = (1..=8).map(|i| neutral(f, i) + "\n").collect();
            std::fs::write(seed.join(f), body).unwrap();
        }
        std::fs::write(dir.join("script.toml"), self.script()).unwrap();
        let cfg = dir.join("sim.toml");
        std::fs::write(
            &cfg,
            format!(
                "k = {}\niterations = {}\nharness = {seed:?}\n[benchmark]\npath = {bench:?}\n\
                 [sandbox]\nbackend = \"local\"\nconcurrency = 4\ninfra_retries = 1\n\
                 [evolve]\nrollback = \"auto\"\n{}[attribution]\ncanary = {}\n{}\
                 [models.default]\nprovider = \"mock\"\nmodel = \"script\"\nscript = {:?}\n",
                self.k,
                self.iterations(),
                self.evolve,
                self.canary,
                self.attribution,
                dir.join("script.toml")
            ),
        )
        .unwrap();
        cfg
    }

    /// The mock script: the code agent's rules, a debugger, and iteration 1's edits.
    fn script(&self) -> String {
        let mut s = String::new();
        for n in (1..=self.tasks).filter(|n| !self.failing.contains(n)) {
            let word = format!("`out-{n:02}`");
            let (when, unless) = if self.fails_at_first(n) {
                (
                    format!("when_system_contains = \"FIX-K{n:02}\"\n"),
                    String::new(),
                )
            } else {
                (
                    String::new(),
                    format!("unless_system_contains = \"BREAK-K{n:02}\"\n"),
                )
            };
            let _ = write!(
                s,
                "[[code_agent]]\nwhen_task_contains = {word:?}\n{when}{unless}tool = \"$shell\"\n\
                 args = {{ command = \"echo out-{n:02} > /app/out.txt\" }}\n\n"
            );
        }
        s.push_str("[[debugger]]\ntool = \"list_trials\"\n\n[[debugger]]\ncontent = \"## Failure summary\\nThe agent did not write the word.\\n## Root cause\\nNo lesson.\"\n\n");
        let entry = |it: u32, tool: &str, args: String| {
            format!("[[evolve]]\nwhen_task_contains = \"# Iteration {it}\\n\"\ntool = {tool:?}\nargs = {args}\n\n")
        };
        let mut changes = self.changes.clone();
        changes.sort_by_key(|c| c.iteration);
        for (i, c) in changes.iter().enumerate() {
            // An edit next to a neutral line (never removed), so that a later iteration's
            // change lands on whatever the harness holds by then (rollbacks included).
            let (old, new) = match c.top {
                true => {
                    let n = neutral(c.file, 1);
                    (n.clone(), format!("{}\n{n}", line(c)))
                }
                false => {
                    let n = neutral(c.file, 8);
                    (n.clone(), format!("{n}\n{}", line(c)))
                }
            };
            s.push_str(&entry(
                c.iteration,
                "edit_file",
                format!(
                    "{{ path = \"harness/{}\", old_text = {old:?}, new_text = {new:?} }}",
                    c.file
                ),
            ));
            let names: Vec<String> = c.tasks().into_iter().map(task).collect();
            let t = format!("{names:?}");
            let (fixes, risks) = match (c.effect, c.predicted) {
                (Effect::Fix, true) => (t, "[]".to_string()),
                (Effect::Break, true) => ("[]".to_string(), t),
                (Effect::Nothing, true) => (t, "[]".to_string()),
                _ => ("[]".to_string(), "[]".to_string()),
            };
            s.push_str(&entry(
                c.iteration,
                "commit_change",
                format!(
                    "{{ id = {:?}, type = \"new\", description = \"Lesson {} in {}\", files = [{:?}], \
                     predicted_fixes = {fixes}, risk_tasks = {risks}, component = \"memory\" }}",
                    c.id, c.id, c.file, c.file
                ),
            ));
            if changes
                .get(i + 1)
                .is_none_or(|n| n.iteration != c.iteration)
            {
                s.push_str(&entry(
                    c.iteration,
                    "submit_manifest",
                    "{ changes = [] }".into(),
                ));
            }
        }
        s
    }

    /// Runs `ahe evolve` on the scenario; returns the output and the run directory.
    pub fn run(&self, dir: &Path, root: &Path, ahe: &Path) -> (Output, PathBuf) {
        let cfg = self.write(dir, root);
        let runs = dir.join("runs");
        let mut c = Command::new(ahe);
        c.args(["evolve", "--config", cfg.to_str().unwrap(), "--name", "sim"])
            .args(["--runs-dir", runs.to_str().unwrap(), "--no-check"])
            .current_dir(root);
        (within::output_within(c), runs.join("sim"))
    }

    /// What the run did against the ground truth: each change is judged by the iteration
    /// after the one that made it.
    pub fn outcome(&self, run: &Path) -> Outcome {
        let mut o = Outcome::default();
        let best = git(run, &["rev-parse", "best"]);
        for c in &self.changes {
            let it = run.join(format!("iterations/{:03}", c.iteration + 1));
            let ev: Value = read_json(&it.join("change_evaluation.json"));
            let manifest: Value = read_json(&it.join("evolve/manifest.json"));
            let verdict = ev["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["id"] == c.id.as_str())
                .and_then(|v| v["verdict"].as_str())
                .unwrap_or("")
                .to_string();
            o.verdicts.insert(c.id.clone(), verdict.clone());
            let mut rolled: Vec<String> = manifest["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    c["id"]
                        .as_str()?
                        .strip_prefix("rollback-")
                        .map(String::from)
                })
                .collect();
            // Culprits the canary reverted before the rollout.
            let by_canary = ev["canary"]["rolled_back"].as_array().cloned();
            rolled.extend(
                by_canary
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(String::from)),
            );
            let tag = format!("iter-{:03}:{}", c.iteration + 1, c.file);
            let present = git(run, &["show", &tag]).contains(&line(c));
            let in_best =
                git(run, &["show", &format!("{}:{}", best.trim(), c.file)]).contains(&line(c));
            match c.effect {
                Effect::Break => {
                    o.harmful += 1;
                    let judged = verdict == "HARMFUL" || verdict == "UNJUDGED";
                    if judged && rolled.contains(&c.id) && !present {
                        o.harmful_rolled_back += 1;
                    }
                    o.harmful_in_best += u32::from(in_best);
                }
                Effect::Fix => o.collateral_lines_lost += u32::from(!present),
                Effect::Nothing => {}
            }
            if c.iteration == 1 {
                o.prediction = ev["prediction_vs_truth"].clone();
            }
        }
        let journal = std::fs::read_to_string(run.join("journal.jsonl")).unwrap_or_default();
        o.trials = journal.matches("\"ev\":\"trial_done\"").count() as u32;
        // Attribution's extra trials (the final re-evaluation's are a cost of their own).
        o.extra_trials = journal
            .lines()
            .filter(|l| {
                l.contains("\"ev\":\"extra_trial_done\"") && !l.contains("\"set\":\"final/")
            })
            .count() as u32;
        o.final_trials = journal.matches("\"set\":\"final/").count() as u32;
        o
    }

    /// The verdicts the ground truth calls for.
    pub fn expected_verdicts(&self) -> BTreeMap<String, String> {
        self.changes
            .iter()
            .map(|c| {
                let v = match c.effect {
                    Effect::Break => "HARMFUL",
                    Effect::Fix => "EFFECTIVE",
                    Effect::Nothing => "INEFFECTIVE",
                };
                (c.id.clone(), v.to_string())
            })
            .collect()
    }

    /// The change-level (precision, recall) of fix and risk predictions by the ground truth.
    pub fn expected_quality(&self) -> [(Option<f64>, Option<f64>); 2] {
        let q = |effect: Effect| {
            let all: Vec<&SimChange> = self.changes.iter().filter(|c| c.effect == effect).collect();
            let hits = all.iter().filter(|c| c.predicted).count();
            let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
            (ratio(hits, hits), ratio(hits, all.len()))
        };
        [q(Effect::Fix), q(Effect::Break)]
    }
}

/// The figures one scenario run gives.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Verdict per change id (iteration 2's change_evaluation.json).
    pub verdicts: BTreeMap<String, String>,
    /// Harmful changes injected.
    pub harmful: u32,
    /// Of those: judged HARMFUL (or UNJUDGED), rolled back, and their line gone from the
    /// next harness.
    pub harmful_rolled_back: u32,
    /// Lines of helpful changes missing from the next harness.
    pub collateral_lines_lost: u32,
    /// Harmful changes whose line is in the harness tagged `best`.
    pub harmful_in_best: u32,
    /// Rollout trials (journal trial_done).
    pub trials: u32,
    /// Confirmation + counterfactual (+ canary) trials (journal extra_trial_done).
    pub extra_trials: u32,
    /// Trials of the final re-evaluation.
    pub final_trials: u32,
    /// `prediction_vs_truth` of iteration 2.
    pub prediction: Value,
}

fn read_json(p: &Path) -> Value {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

fn git(run: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(run.join("harness"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}
