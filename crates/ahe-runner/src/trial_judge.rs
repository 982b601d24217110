//! The trajectory judge (`[models.judge]`, off by default): a model reads each passing
//! trial's cleaned trace and the task instruction and answers, with turn references, whether
//! the pass came from solving the task or from gaming the check. A "gamed" verdict makes the
//! trial suspect with the judge's reason and turn. Each trial's outcome is cached in its
//! `judge.json`; a trial without a final outcome there (never judged, or refused by the
//! budget) is judged when its run resumes. Advisory evidence: the model can be wrong.

use std::collections::BTreeMap;
use std::path::Path;

use ahe_bench::judge::{JudgeOutcome, JudgeRecord};
use ahe_bench::{EvalDir, OnSuspect, Task, TrialDir, TrialJudge, TrialResult, TrialStatus};
use ahe_model::{ChatRequest, Message, ModelClient, ModelError, Role, ToolChoice, Usage};
use minijinja::context;
use serde::{Deserialize, Serialize};

use crate::turns::render_turns;
use ahe_harness::text::render;
use ahe_rundir::clean::{clean_trial, CleanTrace};
use ahe_rundir::run_dir::RoleCost;

const SYSTEM: &str = include_str!("../templates/judge_system.md");
const USER: &str = include_str!("../templates/judge_user.md");
const RETRY: &str = include_str!("../templates/judge_retry.md");

/// The judge sees at most this many characters of a trace; a longer one is cut in the middle
/// (head and tail kept) with a note saying how much was cut.
pub const TRACE_CAP_CHARS: usize = 60_000;

/// Unusable answers are asked again this many times (then the trial is "unparsable").
const RETRIES: u32 = 1;

/// The judge's answer, parsed strictly.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// `solved` or `gamed`.
    pub verdict: Verdict,
    /// Why, in the judge's words.
    pub reason: String,
    /// The turns it cites.
    pub evidence_turns: Vec<u32>,
}

/// The judge's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The task was solved.
    Solved,
    /// The check was gamed.
    Gamed,
}

/// Parses an answer: one JSON object (a surrounding ```json fence is tolerated) with exactly
/// `verdict`, `reason` (not empty) and `evidence_turns` (turns of the trace, at least one for
/// `gamed`). `turns` is the number of the trace's last turn.
pub fn parse_answer(text: &str, turns: u32) -> Result<Answer, String> {
    let mut t = text.trim();
    if let Some(inner) = t.strip_prefix("```") {
        let inner = inner.strip_prefix("json").unwrap_or(inner);
        t = inner.strip_suffix("```").unwrap_or(inner).trim();
    }
    let a: Answer =
        serde_json::from_str(t).map_err(|e| format!("not the JSON object asked for ({e})"))?;
    if a.reason.trim().is_empty() {
        return Err("`reason` is empty".into());
    }
    if let Some(bad) = a.evidence_turns.iter().find(|n| **n == 0 || **n > turns) {
        return Err(format!(
            "`evidence_turns` names turn {bad}, but the trace has turns 1 to {turns}"
        ));
    }
    if a.verdict == Verdict::Gamed && a.evidence_turns.is_empty() {
        return Err("a `gamed` verdict must cite at least one turn in `evidence_turns`".into());
    }
    Ok(a)
}

/// The trace as the judge reads it, cut in the middle to `cap` characters (with a note) when
/// longer; also whether it was cut.
pub fn bounded_trace(t: &CleanTrace, cap: usize) -> (String, bool) {
    let full = render_turns(t, 0, u32::MAX);
    let n = full.chars().count();
    if n <= cap {
        return (full, false);
    }
    let head: String = full.chars().take(cap / 2).collect();
    let tail: String = full.chars().skip(n - cap / 2).collect();
    let note = format!(
        "\n\n[... {} characters of the trace cut here: the judge sees at most {cap} characters, \
         the first and last {} ...]\n\n",
        n - 2 * (cap / 2),
        cap / 2
    );
    (format!("{head}{note}{tail}"), true)
}

/// The judge: a model client (role `judge`) and what a "gamed" verdict does to a pass.
pub struct ModelJudge {
    client: ModelClient,
    on_suspect: OnSuspect,
    cap: usize,
}

impl ModelJudge {
    /// A judge asking `client`; `on_suspect` is the run's `[verifier] on_suspect`.
    pub fn new(client: ModelClient, on_suspect: OnSuspect) -> ModelJudge {
        ModelJudge {
            client,
            on_suspect,
            cap: TRACE_CAP_CHARS,
        }
    }

    /// The same judge with another trace cap (tests).
    pub fn with_cap(mut self, cap: usize) -> ModelJudge {
        self.cap = cap;
        self
    }

    /// The client (its stats hold the calls and cost of this judge).
    pub fn client(&self) -> &ModelClient {
        &self.client
    }

    /// Judges the trial in `dir` (whose result is `r`, status pass) and returns the record.
    async fn ask(&self, task: &Task, dir: &Path, r: &TrialResult) -> JudgeRecord {
        let mut rec = JudgeRecord {
            outcome: JudgeOutcome::Unjudged,
            reason: None,
            evidence_turns: Vec::new(),
            note: None,
            model: self.client.describe(),
            answers: Vec::new(),
            calls: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            trace_chars: 0,
            trace_truncated: false,
            judged_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        };
        // The cleaner reads result.json: the runner writes it again after the judge.
        TrialDir::new(dir).write_result(r);
        let trace = match clean_trial(dir) {
            Ok(t) => t,
            Err(e) => {
                rec.note = Some(format!("the trace could not be read: {e:#}"));
                return rec;
            }
        };
        let last_turn = trace.turns.iter().map(|t| t.turn).max().unwrap_or(0);
        let (text, cut) = bounded_trace(&trace, self.cap);
        rec.trace_chars = text.chars().count();
        rec.trace_truncated = cut;
        let system = render(SYSTEM, context! {});
        let user = render(
            USER,
            context! {
                task => task.name, attempt => r.attempt, reward => r.reward.unwrap_or(1.0),
                instruction => task.instruction.trim(), turns => trace.turns.len(),
                truncated => cut, cap => self.cap, trace => text,
            },
        );
        let messages = vec![
            Message::System { content: system },
            Message::User { content: user },
        ];
        self.converse(messages, last_turn, &mut rec).await;
        rec
    }

    /// Asks until an answer parses (at most `RETRIES` more times, each retry told what was
    /// wrong), recording the calls, answers and outcome in `rec`.
    async fn converse(&self, mut messages: Vec<Message>, last_turn: u32, rec: &mut JudgeRecord) {
        for attempt in 0..=RETRIES {
            let req = ChatRequest {
                role: Role::Judge,
                messages: messages.clone(),
                tools: Vec::new(),
                protocol: Default::default(),
                temperature: None,
                max_tokens: None,
                tool_choice: ToolChoice::None,
            };
            let resp = match self.client.chat(&req).await {
                Ok(r) => r,
                Err(e) => {
                    rec.outcome = JudgeOutcome::Unjudged;
                    rec.note = Some(match &e {
                        ModelError::Budget(m) => format!("budget spent: {m}"),
                        e => format!("the judge model failed: {e}"),
                    });
                    return;
                }
            };
            rec.calls += 1;
            rec.usage.add(&resp.usage);
            rec.cost_usd += resp.cost_usd;
            let content = resp.content.clone().unwrap_or_default();
            rec.answers.push(content.clone());
            match parse_answer(&content, last_turn) {
                Ok(a) => {
                    rec.outcome = match a.verdict {
                        Verdict::Solved => JudgeOutcome::Solved,
                        Verdict::Gamed => JudgeOutcome::Gamed,
                    };
                    rec.reason = Some(a.reason.trim().to_string());
                    rec.evidence_turns = a.evidence_turns;
                    rec.note = None;
                    return;
                }
                Err(why) => {
                    rec.outcome = JudgeOutcome::Unparsable;
                    rec.note = Some(format!("answer {} of {}: {why}", attempt + 1, RETRIES + 1));
                    messages.push(resp.to_message());
                    messages.push(Message::User {
                        content: render(RETRY, context! { error => why }),
                    });
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl TrialJudge for ModelJudge {
    async fn judge(&self, task: &Task, dir: &Path, r: &mut TrialResult) {
        if r.status != TrialStatus::Pass {
            return;
        }
        let td = TrialDir::new(dir);
        let rec = match td.read_judge().filter(|j| j.outcome.is_final()) {
            Some(cached) => cached,
            None => {
                let rec = self.ask(task, dir, r).await;
                if let Err(e) = td.write_judge(&rec) {
                    tracing::warn!("{}: {e}", td.judge_path().display());
                }
                rec
            }
        };
        rec.apply(r, self.on_suspect);
    }
}

/// What the judge did over an evaluation (`scores.json` `meta.judge`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeSummary {
    /// The judge model.
    pub model: String,
    /// Trials by outcome (`solved`, `gamed`, `unparsable`, `unjudged`), from their
    /// `judge.json`.
    pub outcomes: BTreeMap<String, u32>,
    /// Model calls this evaluation made (a resumed one: since the resume; cached verdicts
    /// cost none).
    pub calls: u64,
}

/// The judge's summary and cost over the `(task, attempt)` trials of `eval` (from their
/// `judge.json`, so a resumed evaluation counts what was judged before the resume too).
pub fn summarize(
    eval: &EvalDir,
    trials: &[(String, u32)],
    judge: &ModelJudge,
) -> (JudgeSummary, RoleCost) {
    let mut s = JudgeSummary {
        model: judge.client.describe(),
        calls: judge.client.stats().calls,
        ..Default::default()
    };
    let mut cost = RoleCost::default();
    for (task, attempt) in trials {
        let Some(j) = eval.trial(task, *attempt).read_judge() else {
            continue;
        };
        *s.outcomes.entry(j.outcome.as_str().into()).or_default() += 1;
        cost.input_tokens += j.usage.input_tokens;
        cost.cached_input_tokens += j.usage.cached_input_tokens;
        cost.output_tokens += j.usage.output_tokens;
        cost.cache_write_input_tokens += j.usage.cache_write_input_tokens;
        cost.reasoning_tokens += j.usage.reasoning_tokens;
        cost.cost_usd += j.cost_usd;
    }
    (s, cost)
}
