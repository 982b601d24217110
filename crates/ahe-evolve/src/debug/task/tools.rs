//! The debugger's read-only tools over one task's cleaned traces (jailed in Rust: they
//! reach no other task and no file outside the task's trials).

use std::path::PathBuf;
use std::sync::Arc;

use ahe_model::ToolSpec;
use serde_json::Value;

use super::*;
use crate::debug::host_agent::{arg_str, schema, HostTool, ToolReply};
use ahe_rundir::clean::CleanTrace;

/// The cleaned traces and trial directories of the one task a debugger may read.
pub(super) struct TaskTraces {
    pub(super) traces: Vec<CleanTrace>,
    pub(super) trial_dirs: Vec<PathBuf>,
    pub(super) show_verifier: bool,
}

/// The tool that lists the task's trials.
pub(super) struct ListTrials(pub(super) Arc<TaskTraces>);
/// The tool that reads turns of one trial's cleaned trace.
pub(super) struct ReadTrace(pub(super) Arc<TaskTraces>);
/// The tool that searches the task's traces.
pub(super) struct Search(pub(super) Arc<TaskTraces>);
/// The tool that reads a trial's verifier output (when shown).
pub(super) struct ReadVerifier(pub(super) Arc<TaskTraces>);

#[async_trait::async_trait]
impl HostTool for ListTrials {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_trials".into(),
            description: text::describe("debugger", "list_trials"),
            input_schema: schema(&[], &[]),
        }
    }
    async fn call(&self, _: &Value) -> ToolReply {
        let lines: Vec<String> = self
            .0
            .traces
            .iter()
            .map(|t| {
                let ctx = context! {
                    attempt => t.attempt, status => &t.status, reward => t.reward,
                    turns => t.turns.len(), end => t.agent_end.as_deref().unwrap_or("-"),
                    suspect => !t.suspect.is_empty(),
                };
                text::say("debugger", "list_trials", "line", ctx)
            })
            .collect();
        ToolReply::Text(lines.join("\n"))
    }
}

#[async_trait::async_trait]
impl HostTool for ReadTrace {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_trace".into(),
            description: text::describe("debugger", "read_trace"),
            input_schema: schema(
                &[
                    ("attempt", "integer"),
                    ("from_turn", "integer"),
                    ("to_turn", "integer"),
                ],
                &["from_turn", "to_turn"],
            ),
        }
    }
    async fn call(&self, args: &Value) -> ToolReply {
        let a = args.get("attempt").and_then(Value::as_u64).unwrap_or(0) as u32;
        let Some(t) = self.0.traces.iter().find(|t| t.attempt == a) else {
            return ToolReply::Error(text::say(
                "debugger",
                "read_trace",
                "no_trial",
                context! { attempt => a },
            ));
        };
        let from = args.get("from_turn").and_then(Value::as_u64).unwrap_or(1) as u32;
        let to = args
            .get("to_turn")
            .and_then(Value::as_u64)
            .map(|x| x as u32)
            .unwrap_or(from + 19);
        ToolReply::Text(render_turns(t, from, to))
    }
}

#[async_trait::async_trait]
impl HostTool for Search {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "search".into(),
            description: text::describe("debugger", "search"),
            input_schema: schema(&[("pattern", "string")], &[]),
        }
    }
    async fn call(&self, args: &Value) -> ToolReply {
        let re = match arg_str(args, "pattern").map(regex::Regex::new) {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                let ctx = context! { error => e.to_string() };
                return ToolReply::Error(text::say("debugger", "search", "bad_pattern", ctx));
            }
            Err(e) => return ToolReply::Error(e),
        };
        let mut hits = Vec::new();
        for t in &self.0.traces {
            let text = render_turns(t, 0, u32::MAX);
            let mut turn = "?".to_string();
            for line in text.lines() {
                if let Some(n) = line.strip_prefix("--- turn ") {
                    turn = n.split(' ').next().unwrap_or("?").to_string();
                } else if re.is_match(line) && hits.len() < 60 {
                    let ctx =
                        context! { attempt => t.attempt, turn => &turn, line => clip(line, 300) };
                    hits.push(text::say("debugger", "search", "hit", ctx));
                }
            }
        }
        ToolReply::Text(if hits.is_empty() {
            text::say("debugger", "search", "no_match", context! {})
        } else {
            hits.join("\n")
        })
    }
}

#[async_trait::async_trait]
impl HostTool for ReadVerifier {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_verifier_output".into(),
            description: text::describe("debugger", "read_verifier_output"),
            input_schema: schema(&[("attempt", "integer")], &[]),
        }
    }
    async fn call(&self, args: &Value) -> ToolReply {
        if !self.0.show_verifier {
            let msg = text::say("debugger", "read_verifier_output", "hidden", context! {});
            return ToolReply::Error(msg);
        }
        let a = args.get("attempt").and_then(Value::as_u64).unwrap_or(0) as usize;
        match self.0.trial_dirs.iter().find(|d| {
            d.file_name()
                .is_some_and(|n| n.to_string_lossy() == a.to_string())
        }) {
            // Through a cap-std root at the trial dir: a link out of it is refused, not read.
            Some(d) => ToolReply::Text(clip(
                &cap_std::fs::Dir::open_ambient_dir(d, cap_std::ambient_authority())
                    .and_then(|dir| dir.read_to_string("verifier/stdout.txt"))
                    .unwrap_or_default(),
                8000,
            )),
            None => ToolReply::Error(text::say(
                "debugger",
                "read_verifier_output",
                "no_trial",
                context! { attempt => a },
            )),
        }
    }
}
