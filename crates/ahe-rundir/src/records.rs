//! The typed records of a run directory: `best.json` ([`Best`]), an iteration's own facts
//! in `scores.json` `meta` ([`IterationRecord`], [`RoleCost`]) and the scores read back with
//! them ([`IterationScores`]). Where they live on disk is `run_dir`'s business.

use std::collections::{BTreeMap, BTreeSet};

use ahe_bench::Scores;
use serde::{Deserialize, Serialize};

/// `best.json`: the best evaluated harness so far.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Best {
    /// Iteration whose evaluation was best.
    pub iteration: u32,
    /// Commit of the evaluated harness.
    pub commit: String,
    /// Its visible pass@1.
    pub pass_at_1: f64,
    /// Why it is best: first evaluated, beat the previous best beyond noise (paired), or won
    /// the final re-evaluation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
    /// The iteration with the highest visible pass@1 that did not beat best beyond noise
    /// (re-evaluated at the end beside best and the seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contender: Option<Contender>,
}

/// A harness whose figure was higher than best's but within noise of it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Contender {
    /// Its iteration.
    pub iteration: u32,
    /// Its commit.
    pub commit: String,
    /// Its visible pass@1.
    pub pass_at_1: f64,
    /// Its paired difference to best (on the tasks both ran) and that interval.
    pub delta: f64,
    /// The interval.
    pub delta_ci: [f64; 2],
}

/// Tokens and dollars of one role in one iteration (`scores.json` `meta.roles.<role>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleCost {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Of those, read from the provider's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Of the prompt tokens, written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_input_tokens: u64,
    /// Of the completion tokens, reasoning (thinking).
    #[serde(default)]
    pub reasoning_tokens: u64,
    /// Dollars.
    #[serde(default)]
    pub cost_usd: f64,
}

/// What an iteration adds to its evaluation's `scores.json` (the `meta` keys the loop
/// writes; every field is optional so that scores of `ahe eval` and older runs load).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    /// Iteration number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// Commit of the evaluated harness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluated_commit: Option<String>,
    /// pass@1 over the visible tasks (the headline and what `best` compares).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_pass_at_1: Option<f64>,
    /// Its 95% bootstrap interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_pass_at_1_ci: Option<[f64; 2]>,
    /// pass@1 over the held-out tasks, when some are held out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout_pass_at_1: Option<f64>,
    /// Its 95% bootstrap interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout_pass_at_1_ci: Option<[f64; 2]>,
    /// The held-out tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout_tasks: Option<BTreeSet<String>>,
    /// Tokens and dollars per role (`code_agent`, `debugger`, `evolve`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<BTreeMap<String, RoleCost>>,
}

/// `scores.json` of an iteration: the evaluation and the loop's record of it.
#[derive(Debug, Clone)]
pub struct IterationScores {
    /// The evaluation (with `meta.extra` holding the record's keys as written).
    pub scores: Scores,
    /// The loop's typed record.
    pub record: IterationRecord,
}

impl IterationScores {
    /// Reads the record out of `scores.meta` (unknown or mistyped keys are ignored).
    pub fn of(scores: Scores) -> IterationScores {
        let map: serde_json::Map<String, serde_json::Value> = scores
            .meta
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let record =
            serde_json::from_value(serde_json::Value::Object(map.clone())).unwrap_or_else(|_| {
                // One bad key must not hide the others: take the keys one by one.
                let mut r = serde_json::Map::new();
                for (k, v) in map {
                    let one = serde_json::json!({ k.clone(): v.clone() });
                    if serde_json::from_value::<IterationRecord>(one).is_ok() {
                        r.insert(k, v);
                    }
                }
                serde_json::from_value(serde_json::Value::Object(r)).unwrap_or_default()
            });
        IterationScores { scores, record }
    }

    /// Visible pass@1: the record's, else pass@1 over every task.
    pub fn visible_pass_at_1(&self) -> f64 {
        self.record
            .visible_pass_at_1
            .unwrap_or(self.scores.pass_at_1)
    }

    /// Dollars spent in this iteration by every role; the code agent's counts every paid
    /// call (`model_cost_usd`, attempts re-run after an infra error included).
    pub fn spent_usd(&self) -> f64 {
        let code = self
            .scores
            .meta
            .model_cost_usd
            .unwrap_or(0.0)
            .max(self.scores.cost_usd);
        let others: f64 = self
            .record
            .roles
            .iter()
            .flatten()
            .filter(|(r, _)| r.as_str() != "code_agent")
            .map(|(_, c)| c.cost_usd)
            .sum();
        code + others
    }

    /// Tokens and dollars per role, the code agent's from the trial totals.
    pub fn roles(&self) -> BTreeMap<String, RoleCost> {
        let mut out = self.record.roles.clone().unwrap_or_default();
        let s = &self.scores;
        out.insert(
            "code_agent".into(),
            RoleCost {
                input_tokens: s.tokens.input,
                cached_input_tokens: s.tokens.cached_input,
                output_tokens: s.tokens.output,
                cache_write_input_tokens: s.tokens.cache_write_input,
                reasoning_tokens: s.tokens.reasoning,
                cost_usd: s.cost_usd,
            },
        );
        out
    }

    pub(crate) fn store_record(&mut self) {
        if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(&self.record) {
            self.scores.meta.extra.extend(m);
        }
    }
}
