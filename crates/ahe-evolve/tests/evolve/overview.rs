//! The benchmark overview with a scripted debugger model: tasks that share a scripted cause
//! become one pattern with the right failing-trial count and trend against the previous
//! iteration; reports too long for one call go through map–reduce; a failed or
//! budget-refused synthesis falls back to the per-task list and says so.

use std::sync::Arc;

use ahe_bench::{Scores, TrialResult, TrialStatus};
use ahe_evolve::debug::overview::{trend_of, write_overview};
use ahe_model::{Budget, ClientOptions, ModelClient, ModelConfig};
use ahe_rundir::run_dir::analysis::Trend;
use ahe_rundir::run_dir::{IterationScores, RunDir};
use ahe_rundir::IterationDir;

/// (task, trial statuses; `S` = a suspect failure)
type Plan<'a> = &'a [(&'a str, &'a str)];

/// Writes the iteration's scores and a detail report per failing task naming `causes`.
fn iteration(run: &RunDir, t: u32, plan: Plan, causes: &[(&str, &str)]) -> (IterationDir, Scores) {
    let it = run.iteration(t);
    it.create().unwrap();
    let mut results = Vec::new();
    for (task, trials) in plan {
        for (i, c) in trials.chars().enumerate() {
            let mut r = TrialResult::new(task, i as u32 + 1);
            r.status = match c {
                'P' => TrialStatus::Pass,
                'I' => TrialStatus::InfraError,
                _ => TrialStatus::Fail,
            };
            if c == 'S' {
                r.suspect = Some(ahe_bench::tamper::Suspect {
                    reasons: vec![ahe_bench::tamper::SuspectReason {
                        reason: "wrote /logs/verifier/reward.txt".into(),
                        turn: Some(2),
                    }],
                });
            }
            results.push(r);
        }
    }
    let scores = ahe_bench::scores::compute(2, &results, 0.0);
    it.write_scores(IterationScores::of(scores.clone()))
        .unwrap();
    std::fs::create_dir_all(it.details()).unwrap();
    for (task, cause) in causes {
        let text = format!(
            "# `{task}`\n\nTask `{task}`: 2 trial(s).\n\n## Debugger analysis\n\n\
             ## Failure summary\nThe agent failed because of {cause}.\n{}\n<!-- cause: {cause} -->\n",
            "Evidence line of the trace. ".repeat(20)
        );
        std::fs::write(it.detail_path(task), text).unwrap();
    }
    (it, scores)
}

fn client(dir: &std::path::Path, script: &str, budget: Option<Arc<Budget>>) -> ModelClient {
    let path = dir.join("script.toml");
    std::fs::write(&path, script).unwrap();
    let mut cfg = ModelConfig::from_spec(&format!("mock:script={}", path.display())).unwrap();
    cfg.price_input_per_mtok = 3.0;
    cfg.price_output_per_mtok = 15.0;
    let opts = ClientOptions {
        default_cache_dir: None,
        budget,
    };
    ahe_model::build_client_with(&cfg, &opts).unwrap()
}

/// `p` under another name and with `system_prompt` (matched by tasks and component).
fn renamed(p: &ahe_rundir::run_dir::analysis::Pattern) -> ahe_rundir::run_dir::analysis::Pattern {
    let mut q = p.clone();
    q.name = "Other words".into();
    q.component = "system_prompt".into();
    q
}

fn names(plan: Plan) -> Vec<String> {
    plan.iter().map(|(t, _)| t.to_string()).collect()
}

const LIST: &str =
    "# Debugger analysis overview — iteration 1\n\n## Failing: 4 task(s)\n\n- `a` [✗✗] — x\n";

/// Two iterations; the script groups `a` and `b` (heredoc) apart from `c` (timeout).
const SCRIPT: &str = r##"
[[debugger]]
when_task_contains = "# Iteration 1: reports"
content = '''Here is the overview.
{"patterns": [
 {"name": "Heredoc quoting breaks written files", "mechanism": "cat <<EOF expands $vars.",
  "tasks": ["a", "b", "ghost-task"], "component": "Tool Impl",
  "evidence": "detail/a.md: trial 1, turn 3: cat <<EOF > run.sh"},
 {"name": "No timeout on long commands", "mechanism": "sleep hangs", "tasks": ["c"],
  "component": "middleware", "evidence": "detail/c.md: trial 2"}
]}'''

[[debugger]]
when_task_contains = "# Iteration 2: reports"
content = '''{"patterns": [
 {"name": "heredoc quoting breaks written files", "tasks": ["a", "b"], "component": "tool_impl",
  "evidence": "detail/b.md: trial 2, turn 5"},
 {"name": "Wrong working directory", "tasks": ["c"], "component": "system_prompt"}
]}'''
"##;

#[tokio::test]
async fn tasks_sharing_a_cause_become_one_pattern_with_count_and_trend() {
    let d = tempfile::tempdir().unwrap();
    let run = RunDir::new(d.path().join("run"));
    let model = client(d.path(), SCRIPT, None);
    let plan1: Plan = &[
        ("a", "FF"),
        ("b", "FP"),
        ("c", "FF"),
        ("d", "PP"),
        ("e", "II"),
        ("f", "SF"),
    ];
    let causes = [
        ("a", "heredoc"),
        ("b", "heredoc"),
        ("c", "timeout"),
        ("f", "?"),
    ];
    let (it1, s1) = iteration(&run, 1, plan1, &causes);
    let vis = names(plan1);
    let o1 = write_overview(&it1, None, &vis, &s1, Some(&model), 0, LIST)
        .await
        .unwrap();
    let p = &o1.patterns;
    assert_eq!(p.fallback, None);
    assert_eq!(p.patterns.len(), 2, "{p:?}");
    let h = &p.patterns[0];
    assert_eq!(h.tasks, vec!["a", "b"], "the unknown task is dropped");
    assert_eq!(h.trials, 3, "a: 2 failing trials, b: 1");
    assert_eq!(h.component, "tool_impl");
    assert_eq!(h.trend, Trend::New);
    assert_eq!(p.patterns[1].trials, 2);
    assert_eq!(o1.calls, 1);
    assert!(o1.cost_usd > 0.0 && o1.usage.input_tokens > 0);
    let md = it1.overview();
    assert!(md.starts_with("# Debugger analysis overview — iteration 1\n"));
    assert!(
        md.contains("### 1. Heredoc quoting breaks written files — 2 task(s), 3 failing trial(s), component `tool_impl`, trend: new"),
        "{md}"
    );
    assert!(md.contains("detail/a.md: trial 1, turn 3"), "{md}");
    assert!(
        md.contains("Failing tasks in no pattern: `f` (detail/f.md)"),
        "{md}"
    );
    assert!(
        md.contains("## Suspect trials (apart: counted in no pattern)\n\n`f` trial 1"),
        "{md}"
    );
    assert!(
        md.contains("## Per-task list\n\n### Failing: 4 task(s)"),
        "{md}"
    );
    assert_eq!(
        it1.patterns().unwrap(),
        o1.patterns,
        "patterns.json is written"
    );
    let trace = std::fs::read_to_string(it1.overview_trace()).unwrap();
    assert!(
        trace.contains("\"event\":\"assistant\"") && trace.contains("detail/a.md"),
        "{trace}"
    );

    // Iteration 2: b now fails both trials, so the heredoc pattern grew from 3 to 4.
    let plan2: Plan = &[("a", "FF"), ("b", "FF"), ("c", "FF"), ("d", "PP")];
    let (it2, s2) = iteration(&run, 2, plan2, &causes[..3]);
    let prev = it1.patterns();
    let o2 = write_overview(
        &it2,
        prev.as_ref(),
        &names(plan2),
        &s2,
        Some(&model),
        0,
        LIST,
    )
    .await
    .unwrap();
    let p = &o2.patterns;
    assert_eq!(p.patterns[0].trials, 4);
    assert_eq!(
        trend_of(&p.patterns[1], &[renamed(&prev.unwrap().patterns[1])]),
        Trend::Steady
    );
    assert_eq!(
        p.patterns[0].trend,
        Trend::Grew { from: 3 },
        "matched by name"
    );
    assert_eq!(
        p.patterns[1].trend,
        Trend::New,
        "same task, but no name nor component in common: {p:?}"
    );
    assert_eq!(p.gone, vec!["No timeout on long commands"]);
    let md = it2.overview();
    assert!(md.contains("trend: grew (from 3 failing trial(s))"), "{md}");
    assert!(
        md.contains("no longer appear: No timeout on long commands"),
        "{md}"
    );
}

/// Each part is grouped alone, then merged by a reduce call.
const MAP_REDUCE: &str = r#"
[[debugger]]
when_system_contains = "merging partial"
content = '{"patterns": [{"name": "Heredoc", "tasks": ["a", "b", "c"], "component": "tool_impl", "evidence": "detail/c.md"}]}'

[[debugger]]
when_task_contains = "(part 1 of"
content = '{"patterns": [{"name": "Heredoc", "tasks": ["a"], "component": "tool_impl"}]}'

[[debugger]]
unless_system_contains = "merging partial"
content = '{"patterns": [{"name": "heredoc", "tasks": ["b", "c"], "component": "tool_impl"}]}'
"#;

#[tokio::test]
async fn reports_too_long_for_one_call_are_mapped_then_reduced() {
    let d = tempfile::tempdir().unwrap();
    let run = RunDir::new(d.path().join("run"));
    let plan: Plan = &[("a", "FF"), ("b", "FF"), ("c", "FP")];
    let causes = [("a", "heredoc"), ("b", "heredoc"), ("c", "heredoc")];
    let (it, s) = iteration(&run, 1, plan, &causes);
    let model = client(d.path(), MAP_REDUCE, None);
    let o = write_overview(&it, None, &names(plan), &s, Some(&model), 1000, LIST)
        .await
        .unwrap();
    assert_eq!(o.calls, 4, "three parts of one report each, then the merge");
    assert_eq!(o.patterns.patterns.len(), 1);
    assert_eq!(o.patterns.patterns[0].trials, 5);
    assert!(it.overview().contains("merged from 3 parts by the model"));

    // Without the reduce entry the merge call answers no JSON: merged by name instead.
    let no_reduce = MAP_REDUCE.replacen(
        "when_system_contains = \"merging partial\"",
        "when_system_contains = \"never\"",
        1,
    );
    let model = client(d.path(), &no_reduce, None);
    let o = write_overview(&it, None, &names(plan), &s, Some(&model), 1000, LIST)
        .await
        .unwrap();
    let p = &o.patterns.patterns;
    assert_eq!(p.len(), 1, "Heredoc and heredoc are one pattern: {p:?}");
    assert_eq!(p[0].tasks, vec!["a", "b", "c"]);
    assert!(
        it.overview().contains("patterns merged by name"),
        "{}",
        it.overview()
    );
}

#[tokio::test]
async fn a_failed_or_refused_synthesis_leaves_the_list_and_says_why() {
    let d = tempfile::tempdir().unwrap();
    let run = RunDir::new(d.path().join("run"));
    let plan: Plan = &[("a", "FF"), ("d", "PP")];
    let (it, s) = iteration(&run, 1, plan, &[("a", "heredoc")]);
    let model = client(
        d.path(),
        "[[debugger]]\ncontent = \"I cannot tell.\"\n",
        None,
    );
    let o = write_overview(&it, None, &names(plan), &s, Some(&model), 0, LIST)
        .await
        .unwrap();
    assert_eq!(
        o.patterns.fallback.as_deref(),
        Some("the answer holds no JSON object")
    );
    let md = it.overview();
    assert!(md.contains("the synthesis over the task reports did not run or failed (the answer holds no JSON object)"), "{md}");
    assert!(
        md.contains("## Per-task list\n\n### Failing: 4 task(s)\n\n- `a` [✗✗] — x"),
        "{md}"
    );

    let spent = Arc::new(Budget::with_spent(1.0, 1.0));
    let model = client(d.path(), SCRIPT, Some(spent));
    let o = write_overview(&it, None, &names(plan), &s, Some(&model), 0, LIST)
        .await
        .unwrap();
    let why = o.patterns.fallback.unwrap();
    assert!(why.starts_with("refused by the budget"), "{why}");
    assert_eq!(o.cost_usd, 0.0);
    assert!(it.overview().contains("refused by the budget"));
}
