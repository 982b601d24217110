//! The debugger overlapped with the rollout: each trial is cleaned as it finishes, and a
//! task's debugger starts as soon as its k trials are done, within `[evolve]
//! debugger_concurrency`, while other trials still run. The debug phase then waits for
//! these and analyses what is left (after a resume: the tasks without a report).
//!
//! Resume needs nothing new: a debugger writes `analysis/detail/<task>.md` atomically when
//! it ends, and [`crate::debug::task::debug_task`] skips a task whose report exists; a debugger
//! cut off by a crash wrote nothing and runs again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ahe_bench::scores::TaskScore;
use ahe_bench::TrialResult;
use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::debug::task::{DebugSettings, TaskDebug};
use ahe_rundir::run_dir::IterationDir;

/// The work of one task's debugger: given the task and its scores over its k trials.
pub type DebugJob = Arc<dyn Fn(String, TaskScore) -> BoxFuture<'static, TaskDebug> + Send + Sync>;

/// When one overlapped debugger ran (for the live display, tests and the benchmark).
#[derive(Debug, Clone)]
pub struct Span {
    /// The task.
    pub task: String,
    /// When it got its debugger slot.
    pub start: Instant,
    /// When its report was written.
    pub end: Instant,
}

/// Debuggers started during a rollout, as tasks complete.
pub struct DebugOverlap {
    k: u32,
    /// Tasks whose debugger may start early (the visible ones).
    tasks: BTreeSet<String>,
    /// Where each finished trial is cleaned (None: nothing to clean, e.g. a simulation).
    iter_dir: Option<IterationDir>,
    results: Mutex<BTreeMap<String, Vec<TrialResult>>>,
    running: Mutex<JoinSet<(TaskDebug, Span)>>,
    slots: Arc<Semaphore>,
    job: DebugJob,
    /// The real debugger's settings (its model client), shared with the debug phase.
    pub(crate) settings: Option<Arc<DebugSettings>>,
}

impl DebugOverlap {
    /// Debuggers of `tasks` (k trials each), `concurrency` at a time, each running `job`;
    /// with `iter_dir`, every finished trial is cleaned there first.
    pub fn new(
        k: u32,
        tasks: BTreeSet<String>,
        concurrency: usize,
        iter_dir: Option<IterationDir>,
        job: DebugJob,
    ) -> DebugOverlap {
        DebugOverlap {
            k,
            tasks,
            iter_dir,
            results: Mutex::new(BTreeMap::new()),
            running: Mutex::new(JoinSet::new()),
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            job,
            settings: None,
        }
    }

    /// The real debugger of iteration `it` (see [`crate::debug::task::debug_task`]).
    pub fn for_iteration(
        it: &IterationDir,
        k: u32,
        visible: BTreeSet<String>,
        settings: DebugSettings,
    ) -> DebugOverlap {
        let concurrency = settings.concurrency;
        let settings = Arc::new(settings);
        let (dir, shared) = (it.clone(), settings.clone());
        let job: DebugJob = Arc::new(move |task, ts| {
            let (dir, settings) = (dir.clone(), shared.clone());
            Box::pin(
                async move { crate::debug::task::debug_task(&dir, &task, &ts, &settings).await },
            )
        });
        let mut o = DebugOverlap::new(k, visible, concurrency, Some(it.clone()), job);
        o.settings = Some(settings);
        o
    }

    /// Records a finished trial (cleaning it); starts its task's debugger when it was the
    /// task's last. Call it in a tokio runtime.
    pub fn trial_done(&self, r: &TrialResult) {
        if let Some(it) = &self.iter_dir {
            // A failure shows again (and is noted) in the clean phase, which cleans all.
            let _ = ahe_rundir::clean::write_clean(it.trial(&r.task, r.attempt).path());
        }
        if !self.tasks.contains(&r.task) {
            return;
        }
        let complete = {
            let mut all = self.results.lock().unwrap();
            let rs = all.entry(r.task.clone()).or_default();
            if rs.iter().any(|x| x.attempt == r.attempt) {
                return;
            }
            rs.push(r.clone());
            (rs.len() as u32 >= self.k).then(|| rs.clone())
        };
        let Some(rs) = complete else { return };
        let mut ts = ahe_bench::scores::compute(self.k, &rs, 0.0).tasks;
        let Some(score) = ts.remove(&r.task) else {
            return;
        };
        let (slots, job, task) = (self.slots.clone(), self.job.clone(), r.task.clone());
        self.running.lock().unwrap().spawn(async move {
            let _slot = slots.acquire_owned().await.ok();
            let start = Instant::now();
            let d = job(task.clone(), score).await;
            let end = Instant::now();
            (d, Span { task, start, end })
        });
    }

    /// Records trials finished before the rollout started (a resumed one).
    pub fn prime(&self, prior: &[TrialResult]) {
        for r in prior {
            self.trial_done(r);
        }
    }

    /// Waits for every started debugger; returns their outcomes and when each ran.
    pub async fn finish(&self) -> (Vec<TaskDebug>, Vec<Span>) {
        let mut set = std::mem::take(&mut *self.running.lock().unwrap());
        let (mut out, mut spans) = (Vec::new(), Vec::new());
        while let Some(j) = set.join_next().await {
            if let Ok((d, s)) = j {
                out.push(d);
                spans.push(s);
            }
        }
        (out, spans)
    }
}

/// Wall seconds of a debugger run from its trace (first to last event), if it ran.
pub fn debugger_secs(trace: &std::path::Path) -> Option<f64> {
    let text = std::fs::read_to_string(trace).ok()?;
    let ts = |l: &str| -> Option<chrono::DateTime<chrono::FixedOffset>> {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        chrono::DateTime::parse_from_rfc3339(v.get("ts")?.as_str()?).ok()
    };
    let first = text.lines().find_map(ts)?;
    let last = text.lines().rev().find_map(ts).unwrap_or(first);
    Some((last - first).num_milliseconds() as f64 / 1000.0)
}

/// The scheduling key of each task from the previous iteration: its mean trial seconds plus
/// its debugger's seconds weighted by `trial slots / debugger slots` (a debugger second
/// left at the end of the rollout costs that many idle trial slots). A task passed last
/// time (no LLM debugger) adds nothing.
pub fn expected_with_debugger(prev: &IterationDir, weight: f64) -> BTreeMap<String, f64> {
    let Ok(scores) = prev.scores() else {
        return BTreeMap::new();
    };
    let mut out = ahe_runner::rollout::expected_durations(&scores.scores);
    for (task, secs) in out.iter_mut() {
        *secs += weight * debugger_secs(&prev.debugger_trace(task)).unwrap_or(0.0);
    }
    out
}

#[cfg(test)]
#[path = "overlap_tests.rs"]
mod tests;
