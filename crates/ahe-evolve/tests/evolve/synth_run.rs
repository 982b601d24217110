//! A synthetic but format-faithful run directory (docs/run-directory.md) for report tests and the
//! report benchmark: scores via `ahe_bench::scores::compute`, attribution via
//! `attribute::attribute`, clean traces as `CleanTrace`, a journal with phase times.
//! Model output in the traces holds HTML on purpose (`<script>`), to test escaping.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use ahe_attribution::attribute;
use ahe_bench::{AgentEnd, Scores, TrialResult, TrialStatus};
use ahe_model::Usage;
use ahe_rundir::clean::{
    CleanError, CleanMiddleware, CleanToolCall, CleanTrace, CleanTurn, TraceState,
};
use ahe_rundir::journal::{Entry, Phase};
use ahe_rundir::manifest::{Change, ChangeKind, Component, Manifest};
use serde_json::json;

/// Size of the synthetic run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Evolve iterations N (directories 1..=N+1 are written).
    pub iterations: u32,
    /// Tasks.
    pub tasks: usize,
    /// Trials per task.
    pub k: u32,
    /// Turns per trial trace.
    pub turns: u32,
    /// Bytes of each tool output.
    pub output_len: usize,
    /// Held-out tasks (the last ones).
    pub holdout: usize,
}

/// The model output planted in every trace (must come out escaped).
pub const EVIL: &str = "<script>alert('x')</script> & <b>bold</b>";

/// Task name `i`.
pub fn task(i: usize) -> String {
    format!("task-{i:03}")
}

fn passes(task: usize, attempt: u32, t: u32) -> bool {
    let h = (task as u64 * 2654435761 + attempt as u64 * 40503 + t as u64 * 977) % 100;
    h < 30 + 5 * t as u64
}

fn infra(task: usize, attempt: u32, t: u32) -> bool {
    (task + attempt as usize + t as usize).is_multiple_of(37)
}

fn output(len: usize, seed: usize) -> String {
    let words = [
        "error:",
        "warning",
        "src/main.rs:42",
        "\"quoted\"",
        "ok",
        "FAILED",
        "<tag>",
        "&amp;",
        "\ttab",
    ];
    let mut s = String::with_capacity(len + 16);
    let mut i = seed;
    while s.len() < len {
        s.push_str(words[i % words.len()]);
        s.push(if i.is_multiple_of(7) { '\n' } else { ' ' });
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    s
}

fn trace(task: &str, attempt: u32, r: &TrialResult, spec: &Spec) -> CleanTrace {
    let usage = Usage {
        input_tokens: 1200,
        cached_input_tokens: 0,
        output_tokens: 80,
        ..Default::default()
    };
    let turns = (1..=spec.turns)
        .map(|n| CleanTurn {
            turn: n,
            agent: "main".into(),
            content: (n == 1).then(|| format!("Looking at the failure. {EVIL}")),
            tool_calls: vec![CleanToolCall {
                id: format!("call_{n}"),
                name: "run_shell".into(),
                args: json!({"command": format!("cd /app && make test-{n} # {EVIL}")}),
                output: Some(output(spec.output_len, n as usize)),
                ok: n % 5 != 0,
                exit_code: Some(if n % 5 == 0 { 2 } else { 0 }),
                truncated: false,
                error: (n % 5 == 0).then(|| format!("exit status 2 {EVIL}")),
                duration_ms: 120,
            }],
            middleware: if n % 4 == 0 {
                vec![CleanMiddleware {
                    hook: "after_tool".into(),
                    name: "loop_guard".into(),
                    decision: json!({"action": "warn", "message": "repeated command"}),
                }]
            } else {
                vec![]
            },
            feedback: vec![],
            usage,
            duration_ms: 800,
        })
        .collect();
    CleanTrace {
        schema_version: ahe_rundir::clean::CLEAN_SCHEMA_VERSION,
        trial_id: r.trial_id.clone(),
        task: task.into(),
        attempt,
        status: r.status.as_str().into(),
        reward: r.reward,
        agent_end: Some("finished".into()),
        suspect: Vec::new(),
        trace: TraceState::Complete,
        usage: r.usage,
        cost_usd: r.cost_usd,
        duration_ms: r.timings.total_ms,
        subagent_runs: vec![],
        errors: if r.status == TrialStatus::InfraError {
            vec![CleanError {
                turn: 0,
                agent: "main".into(),
                kind: "infra_error".into(),
                message: format!("sandbox died {EVIL}"),
            }]
        } else {
            vec![]
        },
        system_prompt: "You solve tasks.".into(),
        user: format!("Fix {task}. {EVIL}"),
        turns,
    }
}

fn write_json<T: serde::Serialize>(p: &Path, v: &T) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// Writes a finished run of `spec` into `dir` (which must not exist or be empty).
pub fn synth_run(dir: &Path, spec: &Spec) {
    std::fs::create_dir_all(dir).unwrap();
    let names: Vec<String> = (0..spec.tasks).map(task).collect();
    let holdout: BTreeSet<String> = names[spec.tasks - spec.holdout..].iter().cloned().collect();
    let visible: BTreeSet<String> = names
        .iter()
        .filter(|t| !holdout.contains(*t))
        .cloned()
        .collect();
    std::fs::write(
        dir.join("run.toml"),
        format!(
            "name = \"synth\"\nk = {}\niterations = {}\n[benchmark]\npath = \"benchmarks/synth\"\n[sandbox]\nbackend = \"local\"\n[evolve]\nrollback = \"auto\"\n",
            spec.k, spec.iterations
        ),
    )
    .unwrap();
    let mut journal =
        std::io::BufWriter::new(std::fs::File::create(dir.join("journal.jsonl")).unwrap());
    let mut log = |e: Entry| {
        serde_json::to_writer(&mut journal, &e).unwrap();
        journal.write_all(b"\n").unwrap();
    };
    let ts = "2026-05-01T12:00:00.000Z".to_string();
    let mut prev: Option<(Scores, Option<Manifest>)> = None;
    let mut best: Option<(u32, f64)> = None;
    for t in 1..=spec.iterations + 1 {
        let is_final = t == spec.iterations + 1;
        let it = dir.join(format!("iterations/{t:03}"));
        std::fs::create_dir_all(&it).unwrap();
        std::fs::write(
            it.join("evaluated.txt"),
            format!("{:040x}\n", t as u64 * 0x1234567),
        )
        .unwrap();
        let phases: &[Phase] = if is_final {
            &[
                Phase::Rollout,
                Phase::Clean,
                Phase::Attribute,
                Phase::Confirm,
                Phase::Counterfactual,
            ]
        } else {
            &[
                Phase::Rollout,
                Phase::Clean,
                Phase::Attribute,
                Phase::Confirm,
                Phase::Counterfactual,
                Phase::Debug,
                Phase::Evolve,
                Phase::Commit,
            ]
        };
        let mut results = Vec::new();
        log(Entry::PhaseStart {
            iter: t,
            phase: Phase::Rollout,
            ts: ts.clone(),
        });
        for (i, name) in names.iter().enumerate() {
            for a in 1..=spec.k {
                let mut r = TrialResult::new(name, a);
                r.status = if infra(i, a, t) {
                    TrialStatus::InfraError
                } else if passes(i, a, t) {
                    TrialStatus::Pass
                } else {
                    TrialStatus::Fail
                };
                r.reward = (r.status != TrialStatus::InfraError).then_some(
                    if r.status == TrialStatus::Pass {
                        1.0
                    } else {
                        0.0
                    },
                );
                r.agent_end = Some(AgentEnd::Finished);
                r.turns = spec.turns;
                r.usage = Usage {
                    input_tokens: 1200 * spec.turns as u64,
                    cached_input_tokens: 0,
                    output_tokens: 80 * spec.turns as u64,
                    ..Default::default()
                };
                r.cost_usd = 0.004 * spec.turns as f64;
                r.timings.total_ms = 30_000 + (i as u64 * 997) % 60_000;
                let td = it.join(format!("trials/{name}/{a}"));
                ahe_bench::trial::write_result(&td, &r);
                write_json(&td.join("trace.clean.json"), &trace(name, a, &r, spec));
                log(Entry::TrialDone {
                    iter: t,
                    task: name.clone(),
                    attempt: a,
                    status: r.status.as_str().into(),
                });
                results.push(r);
            }
        }
        let mut scores = ahe_bench::scores::compute(spec.k, &results, 600.0);
        let subset = |s: &Scores, set: &BTreeSet<String>| {
            let rates: Vec<f64> = s
                .tasks
                .iter()
                .filter(|(k, _)| set.contains(*k))
                .map(|(_, v)| v.pass_at_1)
                .collect();
            ahe_bench::scores::mean_with_ci(&rates)
        };
        let (vp, vci) = subset(&scores, &visible);
        let (hp, hci) = subset(&scores, &holdout);
        let roles = if is_final {
            json!({"code_agent": {"input_tokens": scores.tokens.input, "output_tokens": scores.tokens.output, "cost_usd": scores.cost_usd}})
        } else {
            json!({
                "code_agent": {"input_tokens": scores.tokens.input, "output_tokens": scores.tokens.output, "cost_usd": scores.cost_usd},
                "debugger": {"input_tokens": 400_000, "output_tokens": 20_000, "cost_usd": 1.5},
                "evolve": {"input_tokens": 250_000, "output_tokens": 15_000, "cost_usd": 0.9},
            })
        };
        for (k, v) in [
            ("iteration", json!(t)),
            ("visible_pass_at_1", json!(vp)),
            ("visible_pass_at_1_ci", json!(vci)),
            ("holdout_pass_at_1", json!(hp)),
            ("holdout_pass_at_1_ci", json!(hci)),
            ("holdout_tasks", json!(holdout)),
            ("roles", roles),
        ] {
            scores.meta.extra.insert(k.into(), v);
        }
        scores.meta.model = Some("synthetic:model".into());
        write_json(&it.join("scores.json"), &scores);
        log(Entry::PhaseEnd {
            iter: t,
            phase: Phase::Rollout,
            ts: ts.clone(),
            secs: 600.0 + t as f64,
        });
        let empty = ahe_bench::scores::compute(spec.k, &[], 0.0);
        let (ps, pm) = prev.take().unwrap_or((empty, None));
        let ev = attribute::attribute(
            t,
            pm.as_ref(),
            &ps,
            &scores,
            &visible,
            &BTreeMap::new(),
            &Default::default(),
        );
        attribute::write(&it, &ev).unwrap();
        if best.is_none_or(|b| vp > b.1) {
            best = Some((t, vp));
        }
        let mut manifest = None;
        if !is_final {
            std::fs::create_dir_all(it.join("analysis/detail")).unwrap();
            std::fs::write(it.join("analysis/overview.md"), "# overview\n").unwrap();
            for name in &visible {
                std::fs::write(it.join(format!("analysis/detail/{name}.md")), "# detail\n")
                    .unwrap();
            }
            let failing: Vec<String> = scores
                .tasks
                .iter()
                .filter(|(n, s)| visible.contains(*n) && s.passed < s.k)
                .map(|(n, _)| n.clone())
                .collect();
            let passing: Vec<String> = scores
                .tasks
                .iter()
                .filter(|(n, s)| visible.contains(*n) && s.passed == s.k)
                .map(|(n, _)| n.clone())
                .collect();
            let changes = (0..3)
                .map(|c| Change {
                    id: format!("c{t}-{c}"),
                    kind: if c == 2 && t > 1 {
                        ChangeKind::Rollback
                    } else {
                        ChangeKind::New
                    },
                    description: format!("Change {c} of iteration {t}: {EVIL}"),
                    files: vec![format!("memory/m{c}.md")],
                    failure_pattern: "pattern".into(),
                    root_cause: "cause".into(),
                    predicted_fixes: failing.iter().skip(c * 3).take(3).cloned().collect(),
                    risk_tasks: passing.iter().skip(c).take(1).cloned().collect(),
                    component: Component::Memory,
                    why_this_component: "why".into(),
                    commit: None,
                })
                .collect();
            let m = Manifest {
                iteration: t,
                changes,
                leak_guard: None,
            };
            write_json(&it.join("evolve/manifest.json"), &m);
            std::fs::write(
                it.join("evolve/diff.patch"),
                "--- a/memory/m0.md\n+++ b/memory/m0.md\n",
            )
            .unwrap();
            std::fs::write(it.join("evolve/summary.md"), "# summary\n").unwrap();
            manifest = Some(m);
        }
        for p in &phases[1..] {
            log(Entry::PhaseStart {
                iter: t,
                phase: *p,
                ts: ts.clone(),
            });
            if *p == Phase::Evolve && t % 3 == 0 {
                log(Entry::Note {
                    iter: t,
                    message: format!(
                        "the edited harness does not validate, edits reverted: {EVIL}"
                    ),
                });
            }
            log(Entry::PhaseEnd {
                iter: t,
                phase: *p,
                ts: ts.clone(),
                secs: 12.5,
            });
        }
        prev = Some((scores, manifest));
    }
    log(Entry::RunEnd {
        ts,
        reason: "completed".into(),
    });
    journal.flush().unwrap();
    let (bt, bp) = best.unwrap();
    write_json(
        &dir.join("best.json"),
        &json!({"iteration": bt, "commit": format!("{:040x}", bt as u64 * 0x1234567), "pass_at_1": bp}),
    );
}
