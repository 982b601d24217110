//! What one trial leaves behind (`result.json`): its status, how the agent ended, timings,
//! and the whole record. A leaf of the crate: the trial runner, scores, the judge and the
//! trial directory's layout all read these types; none of them is imported here.

use ahe_model::Usage;
use ahe_sandbox::HandOver;
use serde::{Deserialize, Serialize};

use crate::tamper::Suspect;

/// Final status of a trial (docs/tasks.md#trial-statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialStatus {
    /// Reward ≥ 1 (also when the agent ran out of time: the verifier still ran).
    Pass,
    /// The verifier ran and the reward is below 1.
    Fail,
    /// The agent hit its time limit and the reward is below 1.
    AgentTimeout,
    /// Sandbox, model or verifier could not run; never a harness failure.
    InfraError,
    /// The verifier wrote no reward, or one that does not parse, or timed out.
    VerifierError,
}

impl TrialStatus {
    /// snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TrialStatus::Pass => "pass",
            TrialStatus::Fail => "fail",
            TrialStatus::AgentTimeout => "agent_timeout",
            TrialStatus::InfraError => "infra_error",
            TrialStatus::VerifierError => "verifier_error",
        }
    }
}

/// How the agent run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEnd {
    /// The agent finished on its own.
    Finished,
    /// Wall-time limit hit.
    Timeout,
    /// Turn limit hit.
    TurnLimit,
    /// Token budget hit.
    TokenLimit,
    /// The conversation outgrew the model's context.
    ContextExceeded,
    /// Model or sandbox failure outside the harness's control.
    InfraError,
    /// A permanent model error (bad key, unknown model): the whole run must stop.
    Fatal,
    /// The sandbox wrote more than the task's storage limit: stopped (the agent's failure).
    StorageLimit,
    /// Stopped for the host's disk reserve (`[sandbox] min_free_disk`): re-run later.
    HostReserve,
}

/// What an agent reports after running in a sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentOutcome {
    /// How it ended.
    pub end: AgentEnd,
    /// Turns taken.
    pub turns: u32,
    /// Tokens used.
    pub usage: Usage,
    /// Cost in USD.
    pub cost_usd: f64,
    /// Error text for infra/fatal ends.
    pub error: Option<String>,
}

impl AgentOutcome {
    /// An outcome with no work done.
    pub fn ended(end: AgentEnd, error: Option<String>) -> Self {
        AgentOutcome {
            end,
            turns: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            error,
        }
    }
}

/// Phase timings in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    /// Sandbox creation and environment setup.
    pub setup_ms: u64,
    /// Agent run.
    pub agent_ms: u64,
    /// Verifier run including copying tests in and logs out.
    pub verifier_ms: u64,
    /// Sandbox teardown.
    pub teardown_ms: u64,
    /// Whole trial.
    pub total_ms: u64,
    /// Of setup and verifier time, the reward-integrity change checks (host-side walks of the
    /// sandbox's writable layer).
    #[serde(default)]
    pub integrity_ms: u64,
    /// Of verifier time, the hand-over (ending the agent's processes, waiting for services
    /// still starting, resetting the verifier's ground).
    #[serde(default)]
    pub handover_ms: u64,
    /// Of verifier time, the counterfactual run of a flagged pass (a copy of the sandbox
    /// without the flagged changes, verified again); 0 when none ran.
    #[serde(default)]
    pub counterfactual_ms: u64,
}

/// How large the change checks' work was: entries of the writable layer walked, and the
/// changes of the agent phase and of the verifier's run they judged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeSet {
    /// Entries in the writable layer at the hand-over.
    pub walked: usize,
    /// Files, links and deletions the agent phase made.
    pub agent: usize,
    /// Files, links and deletions made while the verifier ran.
    pub verifier: usize,
    /// Agent files whose access time had to be reset before the verifier ran (read since
    /// written, or dated ahead); every other file's next read shows by itself.
    #[serde(default)]
    pub reset: usize,
    /// Directories the verifier's run made (outside the working directory) whose content was
    /// not walked: the verifier's own files there decide nothing.
    #[serde(default)]
    pub pruned: usize,
    /// Set when the snapshots were taken inside the sandbox with ahe's static busybox (this
    /// host could not read its layer): the milliseconds spent in the sandbox for them (the
    /// hand-over, walks, access-time resets and copy-out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside_ms: Option<u64>,
    /// Where the checks' time went, in microseconds: walking the writable layer (before the
    /// agent, at the hand-over, after the verifier).
    #[serde(default)]
    pub walk_us: u64,
    /// Comparing snapshots into change sets (with the image look-ups that tell created from
    /// altered).
    #[serde(default)]
    pub diff_us: u64,
    /// Resetting access times before the verifier runs.
    #[serde(default)]
    pub reset_us: u64,
    /// Judging the change sets by the rules (file heads, package records, test files).
    #[serde(default)]
    pub judge_us: u64,
}

/// The contents of `result.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrialResult {
    /// Unique trial id (`<task>/<attempt>` plus a random suffix).
    pub trial_id: String,
    /// Task name.
    pub task: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Final status.
    pub status: TrialStatus,
    /// Verifier reward.
    pub reward: Option<f64>,
    /// How the agent ended, if it ran.
    pub agent_end: Option<AgentEnd>,
    /// Whether the agent ran out of time (the verifier still ran).
    pub agent_timed_out: bool,
    /// Error text for infra/verifier errors.
    pub error: Option<String>,
    /// Agent turns.
    pub turns: u32,
    /// Tokens.
    pub usage: Usage,
    /// Cost in USD.
    pub cost_usd: f64,
    /// Phase timings.
    pub timings: Timings,
    /// Infra retries spent before this result.
    pub infra_retries: u32,
    /// Signs that the agent touched the verifier's ground (`None`: none seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspect: Option<Suspect>,
    /// What the verifier hand-over ended and kept of the agent's processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover: Option<HandOver>,
    /// Which witness of the test run testified (the pytest plugin, Python processes, test
    /// reports read), or that none did (`None`: the verifier did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness: Option<String>,
    /// The size of the change checks' work (`None`: they did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_set: Option<ChangeSet>,
    /// How the sandbox was made, when the researcher should know (e.g. the image pull that
    /// failed and the environment/ build used instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The docker host the trial ran on, when the backend has several (`[sandbox] hosts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Hosts earlier runs of this attempt were lost on (the engine stopped answering; each
    /// was re-run, and none counts as an infra retry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_hosts: Vec<String>,
    /// The sandbox's disk use as the trial's watcher saw it (when it was watched: a storage
    /// limit or a host reserve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<ahe_sandbox::storage::MeterStats>,
    /// Start time (RFC 3339).
    pub started_at: String,
    /// End time (RFC 3339).
    pub finished_at: String,
}

impl TrialResult {
    /// Whether the trial passed and nothing marks it suspect: what the optimiser counts.
    pub fn clean_pass(&self) -> bool {
        self.status == TrialStatus::Pass && self.suspect.is_none()
    }

    /// An empty result for a task attempt (status infra_error until filled).
    pub fn new(task: &str, attempt: u32) -> Self {
        TrialResult {
            trial_id: format!("{task}/{attempt}-{:08x}", rand::random::<u32>()),
            task: task.to_string(),
            attempt,
            status: TrialStatus::InfraError,
            reward: None,
            agent_end: None,
            agent_timed_out: false,
            error: None,
            turns: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            timings: Timings::default(),
            infra_retries: 0,
            suspect: None,
            handover: None,
            change_set: None,
            witness: None,
            notes: Vec::new(),
            host: None,
            lost_hosts: Vec::new(),
            disk: None,
            started_at: now(),
            finished_at: String::new(),
        }
    }
}

/// The time now (RFC 3339, milliseconds).
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
