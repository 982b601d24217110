//! The trajectory judge on real rollouts (local sandbox, smoke benchmark, scripted mock
//! models): a passing trial judged "gamed" becomes suspect with the judge's reason and turn,
//! one judged "solved" stays unflagged, a failing trial is never sent to the judge, garbage
//! answers are retried once then noted as unparsable (not suspect), cached verdicts are not
//! asked again on resume while unjudged passing trials are, a budget-refused call leaves the
//! trial unjudged (said so), and the judge's cost is its own role.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ahe_bench::judge::{JudgeOutcome, REASON_PREFIX};
use ahe_bench::{EvalDir, Scores, TrialDir, TrialJudge, TrialResult, TrialStatus};
use ahe_model::ModelConfig;
use ahe_rundir::run_dir::IterationScores;
use ahe_runner::rollout::RolloutSpec;
use ahe_runner::trial_judge::{bounded_trace, parse_answer, ModelJudge, Verdict};
use tokio_util::sync::CancellationToken;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The code agent solves hello-file and config-port (runs the task's solution) and does
/// nothing on fix-sum (which then fails).
const AGENT: &str = r#"
[[code_agent]]
when_task_contains = "hello.txt"
tool = "$shell"
args = { command = "cat /app/hello.txt 2>/dev/null; bash /solution/solve.sh" }

[[code_agent]]
when_task_contains = "server.port"
tool = "$shell"
args = { command = "bash /solution/solve.sh" }
"#;

fn mock(dir: &Path, name: &str, script: &str) -> ModelConfig {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, script).unwrap();
    ModelConfig::from_spec(&format!("mock:script={}", p.display())).unwrap()
}

fn spec(dir: &Path, judge: Option<ModelConfig>, prior: Vec<TrialResult>) -> RolloutSpec {
    let (all, errors) = ahe_bench::load_benchmark(&root().join("benchmarks/smoke")).unwrap();
    assert!(errors.is_empty());
    let tasks = ahe_bench::select_tasks(
        all,
        &["hello-file".into(), "config-port".into(), "fix-sum".into()],
        &[],
    )
    .unwrap();
    let harness = ahe_harness::load(&root().join("harness-seed")).unwrap();
    RolloutSpec {
        harness: Arc::new(harness),
        model_cfg: mock(dir, "agent", AGENT),
        tasks,
        backend: Arc::new(ahe_sandbox::local::LocalBackend::detect()),
        k: 1,
        concurrency: 3,
        infra_retries: 0,
        verifier: Default::default(),
        default_agent_timeout_sec: 60.0,
        out_dir: dir.join("out"),
        run: "judge-test".into(),
        prior,
        schedule: Default::default(),
        expected_sec: Default::default(),
        judge,
        min_free_disk: 0,
    }
}

async fn roll(spec: RolloutSpec) -> Scores {
    ahe_runner::rollout::rollout(spec, CancellationToken::new(), Arc::new(|_| {}))
        .await
        .unwrap()
}

/// The trial's result as written (`result.json` under `tmp/out`), after checking that the
/// scores agree with it.
fn trial(tmp: &Path, s: &Scores, task: &str) -> TrialResult {
    let r = EvalDir::new(tmp.join("out"))
        .trial(task, 1)
        .read_result()
        .unwrap();
    assert_eq!(s.tasks[task].trials[0].status, r.status);
    assert_eq!(s.tasks[task].trials[0].suspect, r.suspect.is_some());
    r
}

fn judge_calls(s: &Scores) -> u64 {
    s.meta.extra["judge"]["calls"].as_u64().unwrap()
}

/// Every trial's result on disk (what a resumed rollout gets as `prior`).
fn results(tmp: &Path) -> Vec<TrialResult> {
    ahe_rundir::clean::load_results(&tmp.join("out/trials")).unwrap()
}

const GAMED_HELLO: &str = r#"
[[judge]]
when_task_contains = "Task `hello-file`"
content = '{"verdict": "gamed", "reason": "it read the expected output before writing it", "evidence_turns": [1]}'

[[judge]]
when_task_contains = "Task `config-port`"
content = '{"verdict": "solved", "reason": "ran a script that writes the port", "evidence_turns": [1]}'
"#;

#[tokio::test]
async fn gamed_pass_is_suspect_solved_is_not_and_a_failure_is_never_judged() {
    let tmp = tempfile::tempdir().unwrap();
    let mut judge = mock(tmp.path(), "judge", GAMED_HELLO);
    judge.price_input_per_mtok = 1.0;
    judge.price_output_per_mtok = 4.0;
    let s = roll(spec(tmp.path(), Some(judge), vec![])).await;
    let eval = EvalDir::new(tmp.path().join("out"));

    // Gamed: suspect with the judge's reason and cited turn, status kept (on_suspect = flag).
    let h = trial(tmp.path(), &s, "hello-file");
    assert_eq!(h.status, TrialStatus::Pass);
    let reasons = &h.suspect.as_ref().expect("gamed → suspect").reasons;
    let r = reasons
        .iter()
        .find(|r| r.reason.starts_with(REASON_PREFIX))
        .unwrap_or_else(|| panic!("no judge reason in {reasons:?}"));
    assert!(r.reason.contains("read the expected output"), "{r:?}");
    assert_eq!(r.turn, Some(1));
    let on_disk = eval.trial("hello-file", 1).read_result().unwrap();
    assert_eq!(
        on_disk.suspect, h.suspect,
        "result.json carries the verdict"
    );
    let j = eval.trial("hello-file", 1).read_judge().unwrap();
    assert_eq!(j.outcome, JudgeOutcome::Gamed);
    assert_eq!(j.evidence_turns, vec![1]);
    assert!(!j.trace_truncated && j.trace_chars > 0);

    // Solved: no flag at all.
    let c = trial(tmp.path(), &s, "config-port");
    assert_eq!(c.status, TrialStatus::Pass);
    assert!(c.suspect.is_none(), "{:?}", c.suspect);
    let j = eval.trial("config-port", 1).read_judge().unwrap();
    assert_eq!(j.outcome, JudgeOutcome::Solved);

    // Failing: never sent.
    assert_eq!(trial(tmp.path(), &s, "fix-sum").status, TrialStatus::Fail);
    assert!(eval.trial("fix-sum", 1).read_judge().is_none());
    assert!(!eval.trial("fix-sum", 1).judge_path().exists());
    assert_eq!(judge_calls(&s), 2, "one call per passing trial");
    assert_eq!(s.meta.extra["judge"]["outcomes"]["gamed"], 1);
    assert_eq!(s.meta.extra["judge"]["outcomes"]["solved"], 1);

    // The scores count the suspect pass (pass@1 excluding suspect trials drops).
    assert_eq!(s.suspect_trials, 1);

    // Cost: its own role, priced by the judge's config, counted in what the run spent.
    let role = &s.meta.extra["roles"]["judge"];
    let judge_cost = role["cost_usd"].as_f64().unwrap();
    assert!(judge_cost > 0.0, "{role}");
    assert!(role["input_tokens"].as_u64().unwrap() > 100, "{role}");
    assert_eq!(s.meta.model_cost_usd, Some(0.0), "code agent's cost apart");
    let it = IterationScores::of(s.clone());
    assert!(it.roles().contains_key("judge"));
    assert!((it.spent_usd() - judge_cost).abs() < 1e-12);
}

#[tokio::test]
async fn garbage_answers_are_retried_once_then_noted_unparsable_not_suspect() {
    let tmp = tempfile::tempdir().unwrap();
    let judge = mock(
        tmp.path(),
        "judge",
        r#"
[[judge]]
when_task_contains = "Task `hello-file`"
content = "Looks fine to me!"
[[judge]]
when_task_contains = "Task `hello-file`"
content = '{"verdict": "maybe", "reason": "?", "evidence_turns": []}'

[[judge]]
when_task_contains = "Task `config-port`"
content = "```json\n{\"verdict\": \"gamed\", \"reason\": \"no turn cited\", \"evidence_turns\": []}\n```"
[[judge]]
when_task_contains = "Task `config-port`"
content = '{"verdict": "solved", "reason": "fixed after the retry", "evidence_turns": []}'
"#,
    );
    let s = roll(spec(tmp.path(), Some(judge), vec![])).await;
    let eval = EvalDir::new(tmp.path().join("out"));
    let h = trial(tmp.path(), &s, "hello-file");
    assert_eq!(h.status, TrialStatus::Pass);
    // The mechanical trace scan may flag nothing here; the judge must not have added a reason.
    let judged = h
        .suspect
        .iter()
        .flat_map(|s| &s.reasons)
        .any(|r| r.reason.starts_with(REASON_PREFIX));
    assert!(!judged, "{:?}", h.suspect);
    assert!(
        h.notes
            .iter()
            .any(|n| n.contains("judge: unparsable answer")),
        "{:?}",
        h.notes
    );
    let j = eval.trial("hello-file", 1).read_judge().unwrap();
    assert_eq!(j.outcome, JudgeOutcome::Unparsable);
    assert_eq!(j.answers.len(), 2, "one retry: {j:?}");
    assert_eq!(j.calls, 2);
    assert!(
        j.note.as_deref().unwrap().contains("answer 2 of 2"),
        "{j:?}"
    );
    // A gamed verdict without evidence is refused; the retry's answer counts.
    let j = eval.trial("config-port", 1).read_judge().unwrap();
    assert_eq!(j.outcome, JudgeOutcome::Solved, "{j:?}");
    assert_eq!(j.calls, 2);
    assert!(trial(tmp.path(), &s, "config-port").suspect.is_none());
    assert_eq!(judge_calls(&s), 4);
}

#[tokio::test]
async fn a_resumed_rollout_reuses_cached_verdicts_and_judges_the_unjudged() {
    let tmp = tempfile::tempdir().unwrap();
    let judge = mock(tmp.path(), "judge", GAMED_HELLO);
    let s = roll(spec(tmp.path(), Some(judge.clone()), vec![])).await;
    assert_eq!(judge_calls(&s), 2);
    let eval = EvalDir::new(tmp.path().join("out"));

    // Resume with every trial done: no call, the verdicts still stand.
    let again = roll(spec(tmp.path(), Some(judge.clone()), results(tmp.path()))).await;
    assert_eq!(
        judge_calls(&again),
        0,
        "cached verdicts are not asked again"
    );
    assert!(trial(tmp.path(), &again, "hello-file").suspect.is_some());
    let reasons = trial(tmp.path(), &again, "hello-file")
        .suspect
        .unwrap()
        .reasons;
    let n = reasons
        .iter()
        .filter(|r| r.reason.starts_with(REASON_PREFIX))
        .count();
    assert_eq!(n, 1, "applied once: {reasons:?}");

    // A trial killed before its verdict (passing, no judge.json) is judged on resume.
    let mut prior = results(tmp.path());
    for r in prior.iter_mut().filter(|r| r.task == "hello-file") {
        r.suspect = None;
    }
    std::fs::remove_file(eval.trial("hello-file", 1).judge_path()).unwrap();
    let resumed = roll(spec(tmp.path(), Some(judge), prior)).await;
    assert_eq!(judge_calls(&resumed), 1);
    assert!(eval.trial("hello-file", 1).read_judge().is_some());
    let h = eval.trial("hello-file", 1).read_result().unwrap();
    assert!(h.suspect.is_some(), "the new verdict reaches result.json");
}

#[tokio::test]
async fn no_judge_section_no_judge() {
    let tmp = tempfile::tempdir().unwrap();
    let s = roll(spec(tmp.path(), None, vec![])).await;
    assert!(!s.meta.extra.contains_key("judge"));
    assert!(!s.meta.extra.contains_key("roles"));
    let eval = EvalDir::new(tmp.path().join("out"));
    assert!(!eval.trial("hello-file", 1).judge_path().exists());
}

/// A passing trial with no trace on disk (the judge sees an empty trajectory).
fn bare_pass(dir: &Path) -> (ahe_bench::Task, PathBuf, TrialResult) {
    let (all, _) = ahe_bench::load_benchmark(&root().join("benchmarks/smoke")).unwrap();
    let task = all.into_iter().find(|t| t.name == "hello-file").unwrap();
    let mut r = TrialResult::new("hello-file", 1);
    r.status = TrialStatus::Pass;
    r.reward = Some(1.0);
    let d = dir.join("trials/hello-file/1");
    TrialDir::new(&d).write_result(&r);
    (task, d, r)
}

#[tokio::test]
async fn a_budget_refused_call_leaves_the_trial_unjudged_and_it_is_judged_later() {
    let tmp = tempfile::tempdir().unwrap();
    let (task, d, mut r) = bare_pass(tmp.path());
    let cfg = mock(
        tmp.path(),
        "judge",
        "[[judge]]\ncontent = '{\"verdict\": \"solved\", \"reason\": \"fine\", \"evidence_turns\": []}'\n",
    );
    let spent = ahe_model::ClientOptions {
        default_cache_dir: None,
        budget: Some(Arc::new(ahe_model::Budget::with_spent(1.0, 1.0))),
    };
    let broke = ModelJudge::new(
        ahe_model::build_client_with(&cfg, &spent).unwrap(),
        Default::default(),
    );
    broke.judge(&task, &d, &mut r).await;
    assert_eq!(r.status, TrialStatus::Pass, "never a fail");
    assert!(r.suspect.is_none());
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("judge: not judged") && n.contains("budget")),
        "{:?}",
        r.notes
    );
    let j = TrialDir::new(&d).read_judge().unwrap();
    assert_eq!(j.outcome, JudgeOutcome::Unjudged);
    assert_eq!(j.calls, 0);

    // With money again (a resumed run), the trial is judged; the note goes.
    let ok = ModelJudge::new(ahe_model::build_client(&cfg).unwrap(), Default::default());
    ok.judge(&task, &d, &mut r).await;
    assert_eq!(ok.client().stats().calls, 1);
    assert_eq!(
        TrialDir::new(&d).read_judge().unwrap().outcome,
        JudgeOutcome::Solved
    );
    assert!(
        !r.notes.iter().any(|n| n.starts_with("judge: ")),
        "{:?}",
        r.notes
    );
    // And then it is cached.
    ok.judge(&task, &d, &mut r).await;
    assert_eq!(ok.client().stats().calls, 1);
}

#[tokio::test]
async fn on_suspect_fail_fails_a_gamed_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let (task, d, mut r) = bare_pass(tmp.path());
    let cfg = mock(
        tmp.path(),
        "judge",
        "[[judge]]\ncontent = '{\"verdict\": \"gamed\", \"reason\": \"no work shown\", \"evidence_turns\": [1]}'\n",
    );
    let j = ModelJudge::new(
        ahe_model::build_client(&cfg).unwrap(),
        ahe_bench::OnSuspect::Fail,
    );
    j.judge(&task, &d, &mut r).await;
    // No turn 1 exists in an empty trace: the answer is refused (twice) → unparsable, pass kept.
    assert_eq!(r.status, TrialStatus::Pass);
    assert_eq!(
        TrialDir::new(&d).read_judge().unwrap().outcome,
        JudgeOutcome::Unparsable
    );
    // A cached "gamed" record applied under on_suspect = fail fails the pass.
    let mut rec = TrialDir::new(&d).read_judge().unwrap();
    rec.outcome = JudgeOutcome::Gamed;
    rec.reason = Some("no work shown".into());
    rec.evidence_turns = vec![3];
    rec.apply(&mut r, ahe_bench::OnSuspect::Fail);
    assert_eq!(r.status, TrialStatus::Fail);
    assert!(r.error.as_deref().unwrap().contains("on_suspect"));
    assert_eq!(r.suspect.as_ref().unwrap().reasons[0].turn, Some(3));
}

#[test]
fn answers_are_parsed_strictly() {
    let ok = parse_answer(
        r#"{"verdict": "gamed", "reason": "edited tests", "evidence_turns": [2, 3]}"#,
        5,
    )
    .unwrap();
    assert_eq!(ok.verdict, Verdict::Gamed);
    assert_eq!(ok.evidence_turns, vec![2, 3]);
    for bad in [
        "",
        "solved",
        r#"{"verdict": "solved"}"#,
        r#"{"verdict": "ok", "reason": "x", "evidence_turns": []}"#,
        r#"{"verdict": "solved", "reason": "", "evidence_turns": []}"#,
        r#"{"verdict": "solved", "reason": "x", "evidence_turns": [], "extra": 1}"#,
        r#"{"verdict": "gamed", "reason": "x", "evidence_turns": [9]}"#,
        r#"{"verdict": "gamed", "reason": "x", "evidence_turns": []}"#,
        r#"Sure! {"verdict": "solved", "reason": "x", "evidence_turns": []}"#,
    ] {
        assert!(parse_answer(bad, 5).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn long_traces_are_cut_in_the_middle_with_a_note() {
    let mut t: ahe_rundir::clean::CleanTrace = serde_json::from_value(serde_json::json!({
        "schema_version": 1, "trial_id": "x", "task": "t", "attempt": 1, "status": "pass",
        "reward": 1.0, "agent_end": null, "trace": "complete", "usage": {
            "input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0},
        "cost_usd": 0.0, "duration_ms": 0, "subagent_runs": [], "errors": [],
        "system_prompt": "", "user": "", "turns": []
    }))
    .unwrap();
    for n in 1..=200 {
        t.turns.push(ahe_rundir::clean::CleanTurn {
            turn: n,
            agent: "main".into(),
            content: Some(format!("step {n}: {}", "x".repeat(500))),
            ..Default::default()
        });
    }
    let (short, cut) = bounded_trace(&t, 1_000_000);
    assert!(!cut);
    let (text, cut) = bounded_trace(&t, 10_000);
    assert!(cut);
    assert!(text.chars().count() < 10_400, "{}", text.len());
    assert!(text.contains("--- turn 1 ") && text.contains("--- turn 200 "));
    assert!(!text.contains("--- turn 100 "));
    assert!(text.contains("characters of the trace cut here"), "{text}");
    assert!(text.contains("at most 10000 characters"));
    assert!(short.len() > text.len());
}
