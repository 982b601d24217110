//! Unit tests of `debug/overlap.rs`: the scheduling key from a previous iteration, and the
//! overlap starting a task's debugger only once its k trials are in, within its slots.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ahe_bench::{AgentEnd, TrialStatus};

use super::*;
use ahe_rundir::run_dir::IterationScores;

fn result(task: &str, attempt: u32, status: TrialStatus, ms: u64) -> TrialResult {
    let mut r = TrialResult::new(task, attempt);
    r.status = status;
    r.agent_end = (status != TrialStatus::InfraError).then_some(AgentEnd::Finished);
    r.timings.total_ms = ms;
    r
}

#[test]
fn the_key_is_the_mean_trial_time_plus_the_weighted_debugger_time() {
    let tmp = tempfile::tempdir().unwrap();
    let it = IterationDir::at(&tmp.path().join("001"));
    it.create().unwrap();
    let results = [
        result("a", 1, TrialStatus::Pass, 100_000),
        result("a", 2, TrialStatus::Pass, 300_000),
        result("b", 1, TrialStatus::Fail, 50_000),
        // An infra error says nothing about the work: not in b's mean.
        result("b", 2, TrialStatus::InfraError, 1_000),
        result("c", 1, TrialStatus::InfraError, 1_000),
    ];
    let scores = ahe_bench::scores::compute(2, &results, 1.0);
    it.write_scores(IterationScores::of(scores)).unwrap();
    // b's debugger ran 90 s (first to last trace event).
    let trace = it.debugger_trace("b");
    std::fs::create_dir_all(trace.parent().unwrap()).unwrap();
    std::fs::write(
        &trace,
        "{\"t_ms\":0,\"ts\":\"2026-12-02T05:00:00.000Z\",\"event\":\"run_start\"}\n\
         {\"t_ms\":5,\"ts\":\"2026-12-02T05:00:30.000Z\",\"event\":\"assistant\"}\n\
         {\"t_ms\":9,\"ts\":\"2026-12-02T05:01:30.000Z\",\"event\":\"run_end\"}\n",
    )
    .unwrap();
    assert_eq!(debugger_secs(&trace), Some(90.0));
    let key = expected_with_debugger(&it, 4.0);
    assert_eq!(key.get("a"), Some(&200.0), "{key:?}");
    assert_eq!(key.get("b"), Some(&(50.0 + 4.0 * 90.0)), "{key:?}");
    assert_eq!(key.get("c"), None, "only infra errors: no estimate");
    assert!(expected_with_debugger(&IterationDir::at(&tmp.path().join("009")), 4.0).is_empty());
}

#[tokio::test]
async fn a_debugger_starts_once_its_tasks_k_trials_are_in_within_its_slots() {
    let running = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let (r2, m2) = (running.clone(), max.clone());
    let job: DebugJob = Arc::new(move |task, ts: TaskScore| {
        let (running, max) = (r2.clone(), m2.clone());
        Box::pin(async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            max.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            running.fetch_sub(1, Ordering::SeqCst);
            TaskDebug {
                line: format!("{} trials", ts.trials.len()),
                task,
                status: ts.status,
                marks: String::new(),
                out: None,
                spent: Default::default(),
            }
        })
    });
    let tasks: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let o = DebugOverlap::new(2, tasks, 2, None, job);
    o.prime(&[result("a", 1, TrialStatus::Pass, 1)]);
    o.trial_done(&result("hidden", 1, TrialStatus::Fail, 1));
    o.trial_done(&result("hidden", 2, TrialStatus::Fail, 1));
    o.trial_done(&result("b", 1, TrialStatus::Fail, 1));
    // A repeated record (e.g. a prior trial reported again) does not complete a task.
    o.trial_done(&result("b", 1, TrialStatus::Fail, 1));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        running.load(Ordering::SeqCst),
        0,
        "no task has both trials yet"
    );
    for t in ["a", "b", "c"] {
        o.trial_done(&result(t, 2, TrialStatus::Fail, 1));
    }
    o.trial_done(&result("c", 1, TrialStatus::Pass, 1));
    let (done, spans) = o.finish().await;
    let mut names: Vec<&str> = done.iter().map(|d| d.task.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["a", "b", "c"],
        "held-out tasks get no early debugger"
    );
    assert!(done.iter().all(|d| d.line == "2 trials"), "{done:?}");
    assert_eq!(
        max.load(Ordering::SeqCst),
        2,
        "two debugger slots, three tasks"
    );
    assert!(spans.iter().all(|s| s.end >= s.start));
}
