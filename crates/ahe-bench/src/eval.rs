//! Running k trials of many tasks concurrently and writing the trial tree and `scores.json`.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::layout::EvalDir;
use crate::scores::{self, Scores};
use crate::task::Task;
use crate::trial::{run_trial, TrialEnv, TrialResult, TrialStatus};

/// A progress event, for bars and logs.
#[derive(Debug, Clone)]
pub enum Progress {
    /// The evaluation starts with this many trials.
    Start {
        /// Trials to run.
        total: usize,
    },
    /// A trial finished.
    TrialDone {
        /// Its result.
        result: Box<TrialResult>,
    },
    /// A new stage of a longer job begins (e.g. a phase of an evolve iteration).
    Stage {
        /// What it is, e.g. `iter 2/4 rollout`.
        label: String,
        /// Dollars the job spent before this stage (all roles).
        spent_usd: f64,
    },
    /// A line for the researcher (a note, a new best...).
    Message {
        /// The text.
        text: String,
    },
    /// An image pull of the sandbox backend started, progressed, finished or failed.
    Pull(ahe_sandbox::PullEvent),
    /// The load and health of each docker host (`[sandbox] hosts`): sent at the start and
    /// after every trial, only by backends with several hosts.
    Hosts(Vec<ahe_sandbox::HostLoad>),
    /// The host fell below its disk reserve, a trial was stopped for it, or space returned.
    Disk(crate::disk::DiskEvent),
}

/// Sends the backend's host loads, if it has several hosts.
fn send_hosts(backend: &dyn ahe_sandbox::Backend, progress: &(dyn Fn(Progress) + Send + Sync)) {
    let hosts = backend.hosts();
    if !hosts.is_empty() {
        progress(Progress::Hosts(hosts));
    }
}

/// Options of one evaluation.
#[derive(Clone)]
pub struct EvalOptions {
    /// Trials per task.
    pub k: u32,
    /// Trials running at once.
    pub concurrency: usize,
    /// Where `trials/` and `scores.json` go.
    pub out_dir: PathBuf,
    /// Stops starting new trials when cancelled (running ones are abandoned and torn down).
    pub cancel: CancellationToken,
    /// Trials already finished (e.g. before a crash): not run again, but scored.
    pub prior: Vec<TrialResult>,
    /// The order trials start in.
    pub schedule: Schedule,
    /// Expected seconds of one trial per task (e.g. the previous iteration's mean); a task
    /// not listed is expected to take its agent timeout.
    pub expected_sec: BTreeMap<String, f64>,
}

/// The order in which an evaluation starts its trials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Schedule {
    /// Longest expected trial first over every (task, attempt), so that no long trial starts
    /// last and holds the evaluation up alone; a task's attempts start one after another
    /// (its debugger can start early). Tasks expected to take equally long keep the waves'
    /// order (lower attempt first, then task order). No waves otherwise: they would start
    /// the longest task's attempt k only after every task's attempt k-1 has started.
    #[default]
    LongestFirst,
    /// Attempt waves in task order: every task's attempt a before any attempt a+1.
    TaskOrder,
}

/// The (task index, attempt) pairs still to run, in the order they start.
pub fn plan(
    tasks: &[Task],
    k: u32,
    done: &HashSet<(&str, u32)>,
    schedule: Schedule,
    expected: &dyn Fn(&Task) -> f64,
) -> Vec<(usize, u32)> {
    let mut jobs: Vec<(usize, u32)> = (1..=k)
        .flat_map(|a| (0..tasks.len()).map(move |i| (i, a)))
        .filter(|(i, a)| !done.contains(&(tasks[*i].name.as_str(), *a)))
        .collect();
    if schedule == Schedule::LongestFirst {
        let secs: Vec<f64> = tasks.iter().map(expected).collect();
        // Stable: equal expectations keep the waves' order.
        jobs.sort_by(|x, y| secs[y.0].total_cmp(&secs[x.0]));
    }
    jobs
}

tokio::task_local! {
    /// Trial slots shared by evaluations that run at once (`ahe matrix`): inside
    /// [`with_shared_slots`], each trial holds one of these besides its evaluation's own.
    static SHARED_SLOTS: Arc<Semaphore>;
}

/// Runs `f` (evaluations) with one pool of `slots` for all the trials they start: however
/// many evaluations run at once, at most the pool's size of trials do.
pub async fn with_shared_slots<F: std::future::Future>(slots: Arc<Semaphore>, f: F) -> F::Output {
    SHARED_SLOTS.scope(slots, f).await
}

/// Detaches the pull sink of a backend when an evaluation ends (also on error or cancel).
struct Unhook(Arc<dyn ahe_sandbox::Backend>);

impl Drop for Unhook {
    fn drop(&mut self) {
        self.0.set_pull_sink(None);
    }
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `k` attempts of every task; returns the scores (also written to `scores.json`).
/// Cancelled runs return an error after writing nothing but the finished trials.
pub async fn run_eval(
    env: TrialEnv,
    tasks: &[Task],
    opts: &EvalOptions,
    progress: Arc<dyn Fn(Progress) + Send + Sync>,
) -> anyhow::Result<Scores> {
    let t0 = Instant::now();
    std::fs::create_dir_all(&opts.out_dir)?;
    let shared: Vec<Arc<Task>> = tasks.iter().cloned().map(Arc::new).collect();
    let jobs: Vec<(Arc<Task>, u32)> = jobs_to_run(&env, tasks, opts)
        .into_iter()
        .map(|(i, a)| (shared[i].clone(), a))
        .collect();
    progress(Progress::Start { total: jobs.len() });
    send_hosts(env.backend.as_ref(), progress.as_ref());
    // The backend's pulls (docker) show in the live display and are recorded by the caller.
    let pull_progress = progress.clone();
    env.backend
        .set_pull_sink(Some(Arc::new(move |e| pull_progress(Progress::Pull(e)))));
    let _unhook = Unhook(env.backend.clone());
    let _monitor = start_disk_monitor(&env, opts, &progress).await;
    let mut results: Vec<TrialResult> = opts
        .prior
        .iter()
        .filter(|r| tasks.iter().any(|t| t.name == r.task) && r.attempt <= opts.k)
        .cloned()
        .collect();
    run_trials(&env, jobs, opts, &progress, &mut results).await?;
    // Sandboxes may finish their teardown in the background: part of the run's wall time.
    env.backend.drain().await;
    check_finished(tasks, opts, &results)?;
    let mut s = scores::compute(opts.k, &results, t0.elapsed().as_secs_f64());
    scores::add_host_loads(&mut s.meta.hosts, &env.backend.hosts());
    Ok(s)
}

/// The (task index, attempt) pairs to run, in start order: the prior trials skipped, a task
/// expected to take its listed seconds, else its agent timeout, else the default one.
fn jobs_to_run(env: &TrialEnv, tasks: &[Task], opts: &EvalOptions) -> Vec<(usize, u32)> {
    let done: HashSet<(&str, u32)> = opts
        .prior
        .iter()
        .map(|r| (r.task.as_str(), r.attempt))
        .collect();
    let expected = |t: &Task| {
        opts.expected_sec
            .get(&t.name)
            .copied()
            .or(t.agent_timeout_sec)
            .unwrap_or(env.default_agent_timeout.as_secs_f64())
    };
    plan(tasks, opts.k, &done, opts.schedule, &expected)
}

/// Starts the host disk reserve's watch over the run's directory and where the sandboxes
/// write (if the environment has a reserve); it stops when the returned guard drops.
async fn start_disk_monitor(
    env: &TrialEnv,
    opts: &EvalOptions,
    progress: &Arc<dyn Fn(Progress) + Send + Sync>,
) -> Option<AbortOnDrop> {
    let d = env.disk.as_ref()?;
    let mut paths = vec![opts.out_dir.clone()];
    paths.extend(env.backend.disk_paths().await);
    let p = progress.clone();
    let task = tokio::spawn(
        d.clone()
            .monitor(paths, Arc::new(move |e| p(Progress::Disk(e)))),
    );
    Some(AbortOnDrop(task))
}

/// Runs the jobs, at most `concurrency` at once (and one slot of the shared pool each, inside
/// [`with_shared_slots`]), pushing each finished trial's result; stops starting new ones when
/// cancelled and waits for those started.
async fn run_trials(
    env: &TrialEnv,
    jobs: Vec<(Arc<Task>, u32)>,
    opts: &EvalOptions,
    progress: &Arc<dyn Fn(Progress) + Send + Sync>,
    results: &mut Vec<TrialResult>,
) -> anyhow::Result<()> {
    let sem = Arc::new(Semaphore::new(opts.concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    // A trial is spawned only once it holds a permit, so at most `concurrency` trials (and
    // their futures) exist at a time; each finished one leaves only its small result.
    let pool = SHARED_SLOTS.try_with(Arc::clone).ok();
    for (task, attempt) in jobs {
        let permit = tokio::select! {
            p = sem.clone().acquire_owned() => p?,
            _ = opts.cancel.cancelled() => break,
        };
        let pooled = match &pool {
            Some(pool) => tokio::select! {
                p = pool.clone().acquire_owned() => Some(p?),
                _ = opts.cancel.cancelled() => break,
            },
            None => None,
        };
        while let Some(j) = set.try_join_next() {
            if let Ok(Some(r)) = j {
                results.push(r);
            }
        }
        let env = env.clone();
        let dir = EvalDir::new(&opts.out_dir)
            .trial(&task.name, attempt)
            .path()
            .to_path_buf();
        let cancel = opts.cancel.clone();
        let progress = progress.clone();
        set.spawn(async move {
            let _permits = (permit, pooled);
            let r = tokio::select! {
                r = run_trial(&env, &task, attempt, &dir) => r,
                _ = cancel.cancelled() => return None,
            };
            progress(Progress::TrialDone {
                result: Box::new(r.clone()),
            });
            send_hosts(env.backend.as_ref(), progress.as_ref());
            Some(r)
        });
    }
    while let Some(j) = set.join_next().await {
        if let Ok(Some(r)) = j {
            results.push(r);
        }
    }
    Ok(())
}

/// The error of an evaluation that must not be scored: it was interrupted, or a trial found
/// the model unusable.
fn check_finished(
    tasks: &[Task],
    opts: &EvalOptions,
    results: &[TrialResult],
) -> anyhow::Result<()> {
    if opts.cancel.is_cancelled() {
        anyhow::bail!(
            "interrupted: {} of {} trials finished (kept under {})",
            results.len(),
            tasks.len() * opts.k as usize,
            EvalDir::new(&opts.out_dir).trials().display()
        );
    }
    if let Some(fatal) = results
        .iter()
        .find(|r| r.agent_end == Some(crate::trial::AgentEnd::Fatal))
    {
        anyhow::bail!(
            "the model cannot be used: {}",
            fatal.error.as_deref().unwrap_or("permanent model error")
        );
    }
    Ok(())
}

/// Writes `scores.json` of the evaluation in `out_dir` atomically.
pub fn write_scores(out_dir: &Path, s: &Scores) -> std::io::Result<()> {
    EvalDir::new(out_dir).write_scores(s)
}

/// A plain-text per-task table of scores.
pub fn table(s: &Scores) -> String {
    let w = s.tasks.keys().map(|k| k.len()).max().unwrap_or(4).max(4);
    let mut out = format!(
        "{:<w$}  {:>6}  {:<6}  {}\n",
        "task", "passed", "status", "trials"
    );
    for (name, t) in &s.tasks {
        let trials: Vec<&str> = t
            .trials
            .iter()
            .map(|x| match x.status {
                TrialStatus::Pass => "pass",
                TrialStatus::Fail => "fail",
                TrialStatus::AgentTimeout => "timeout",
                TrialStatus::InfraError => "infra",
                TrialStatus::VerifierError => "verr",
            })
            .collect();
        out.push_str(&format!(
            "{:<w$}  {:>6}  {:<6}  {}\n",
            name,
            format!("{}/{}", t.passed, t.k),
            serde_json::to_value(t.status)
                .unwrap()
                .as_str()
                .unwrap_or(""),
            trials.join(" ")
        ));
    }
    out.push_str(&format!(
        "pass@1 = {:.3}  (95% CI {:.3}–{:.3}, {} tasks × k={})\n",
        s.pass_at_1, s.pass_at_1_ci[0], s.pass_at_1_ci[1], s.n_tasks, s.k
    ));
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    use ahe_sandbox::{Backend, ExecOpts, ExecOutput, Sandbox, SandboxSpec};

    use super::*;
    use crate::trial::{Agent, AgentContext, AgentEnd, AgentOutcome};

    /// A sandbox that does nothing; its verifier always writes reward 1.
    struct Fake;

    #[async_trait::async_trait]
    impl Sandbox for Fake {
        async fn exec(&self, _: &str, _: ExecOpts) -> ahe_sandbox::Result<ExecOutput> {
            Ok(ExecOutput {
                exit_code: Some(0),
                ..Default::default()
            })
        }
        async fn put(&self, _: &Path, _: &str) -> ahe_sandbox::Result<()> {
            Ok(())
        }
        async fn get(&self, _: &str, dest: &Path) -> ahe_sandbox::Result<ahe_sandbox::CopyOut> {
            std::fs::create_dir_all(dest)?;
            std::fs::write(dest.join("reward.txt"), "1\n")?;
            Ok(Default::default())
        }
        fn handover_command(&self, _: ahe_sandbox::LeftoverPolicy, _: u32) -> Option<String> {
            None
        }
        fn workdir(&self) -> &str {
            "/app"
        }
        async fn destroy(&self) -> ahe_sandbox::Result<()> {
            Ok(())
        }
    }

    struct FakeBackend;

    #[async_trait::async_trait]
    impl Backend for FakeBackend {
        fn name(&self) -> &'static str {
            "fake"
        }
        async fn create(&self, _: &SandboxSpec) -> ahe_sandbox::Result<Box<dyn Sandbox>> {
            Ok(Box::new(Fake))
        }
    }

    /// Counts how many agents run at once and records the order trials start in.
    #[derive(Default)]
    struct Counting {
        running: AtomicUsize,
        max: AtomicUsize,
        started: Mutex<Vec<(String, u32)>>,
        /// Agents started so far.
        arrivals: AtomicUsize,
        /// One of the first three agents waited in vain for the other two.
        alone: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl Agent for Counting {
        async fn run(&self, ctx: AgentContext<'_>) -> AgentOutcome {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.max.fetch_max(now, Ordering::SeqCst);
            // The first three agents wait until all three run at once: serial execution
            // (or a concurrency of one or two) leaves the first one waiting in vain.
            if self.arrivals.fetch_add(1, Ordering::SeqCst) < 3 {
                let t0 = std::time::Instant::now();
                while self.running.load(Ordering::SeqCst) < 3 {
                    if t0.elapsed() > Duration::from_secs(5) {
                        self.alone.store(true, Ordering::SeqCst);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            let attempt = ctx.trial_dir.file_name().unwrap().to_string_lossy();
            let attempt: u32 = attempt.parse().unwrap();
            self.started
                .lock()
                .unwrap()
                .push((ctx.task.name.clone(), attempt));
            tokio::time::sleep(Duration::from_millis(3)).await;
            self.running.fetch_sub(1, Ordering::SeqCst);
            AgentOutcome::ended(AgentEnd::Finished, None)
        }
    }

    fn tasks(root: &Path, n: usize) -> Vec<Task> {
        tasks_timed(root, &vec![None; n])
    }

    /// Tasks `t0..` with these agent timeouts (None: no `[agent]` table).
    fn tasks_timed(root: &Path, timeouts: &[Option<u32>]) -> Vec<Task> {
        for (i, timeout) in timeouts.iter().enumerate() {
            let d = root.join(format!("t{i}"));
            std::fs::create_dir_all(d.join("tests")).unwrap();
            std::fs::write(d.join("instruction.md"), "Do nothing.\n").unwrap();
            let agent = timeout.map_or(String::new(), |s| format!("[agent]\ntimeout_sec = {s}\n"));
            let toml = format!("{agent}[environment]\ndocker_image = \"x\"\n");
            std::fs::write(d.join("task.toml"), toml).unwrap();
            std::fs::write(d.join("tests/test.sh"), "#!/bin/bash\n").unwrap();
        }
        let (tasks, errors) = crate::load_benchmark(root).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        tasks
    }

    /// A trial environment of no-op sandboxes around `agent`.
    fn env(agent: Arc<Counting>) -> TrialEnv {
        TrialEnv {
            backend: Arc::new(FakeBackend),
            agent,
            run: "test".into(),
            default_agent_timeout: Duration::from_secs(10),
            infra_retries: 0,
            verifier: Default::default(),
            judge: None,
            disk: None,
        }
    }

    #[tokio::test]
    async fn runs_every_trial_within_the_concurrency_attempts_outermost() {
        let tmp = tempfile::tempdir().unwrap();
        let tasks = tasks(&tmp.path().join("bench"), 5);
        let agent = Arc::new(Counting::default());
        let env = env(agent.clone());
        let opts = EvalOptions {
            k: 4,
            concurrency: 3,
            out_dir: tmp.path().join("out"),
            cancel: CancellationToken::new(),
            prior: Vec::new(),
            schedule: Schedule::TaskOrder,
            expected_sec: BTreeMap::new(),
        };
        let done = Arc::new(AtomicUsize::new(0));
        let d2 = done.clone();
        let progress = Arc::new(move |p: Progress| {
            if let Progress::TrialDone { .. } = p {
                d2.fetch_add(1, Ordering::SeqCst);
            }
        });
        let s = run_eval(env, &tasks, &opts, progress).await.unwrap();
        assert_eq!(s.statuses.get("pass"), Some(&20), "{:?}", s.statuses);
        assert_eq!(done.load(Ordering::SeqCst), 20);
        let max = agent.max.load(Ordering::SeqCst);
        assert_eq!(max, 3, "{max} agents ran at once (concurrency 3)");
        assert!(
            !agent.alone.load(Ordering::SeqCst),
            "the first three trials did not run at the same time"
        );
        let started = agent.started.lock().unwrap().clone();
        assert_eq!(started.len(), 20);
        // No attempt starts before every earlier attempt of every task has started.
        for (i, (_, a)) in started.iter().enumerate() {
            let earlier = started[..i].iter().filter(|(_, b)| b < a).count();
            assert_eq!(earlier, 5 * (*a as usize - 1), "{started:?}");
        }
        for t in &tasks {
            for a in 1..=4 {
                assert!(EvalDir::new(&opts.out_dir)
                    .trial(&t.name, a)
                    .result_path()
                    .is_file());
            }
        }
    }

    /// With one slot the start order is the schedule: the longest expected trials first
    /// (previous durations before task timeouts), a task's attempts together.
    #[tokio::test]
    async fn starts_the_trials_expected_to_take_longest_first() {
        let tmp = tempfile::tempdir().unwrap();
        // t0: 100 s timeout, t1: 900 s, t2: none (default 10 s), t3: 300 s but measured 2000 s.
        let tasks = tasks_timed(
            &tmp.path().join("bench"),
            &[Some(100), Some(900), None, Some(300)],
        );
        let agent = Arc::new(Counting {
            arrivals: AtomicUsize::new(3),
            ..Default::default()
        });
        let env = env(agent.clone());
        let opts = EvalOptions {
            k: 2,
            concurrency: 1,
            out_dir: tmp.path().join("out"),
            cancel: CancellationToken::new(),
            prior: Vec::new(),
            schedule: Schedule::LongestFirst,
            expected_sec: BTreeMap::from([("t3".to_string(), 2000.0)]),
        };
        let s = run_eval(env, &tasks, &opts, Arc::new(|_| {}))
            .await
            .unwrap();
        assert_eq!(s.statuses.get("pass"), Some(&8), "{:?}", s.statuses);
        let started = agent.started.lock().unwrap().clone();
        let want: Vec<(String, u32)> = ["t3", "t1", "t0", "t2"]
            .iter()
            .flat_map(|t| [(t.to_string(), 1), (t.to_string(), 2)])
            .collect();
        assert_eq!(started, want, "trials did not start longest first");
    }
}
