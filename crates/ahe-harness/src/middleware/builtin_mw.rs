//! The builtin middleware: their params (checked when the harness loads, parsed and their
//! regexes compiled once when a runtime is built) and what each decides at its hook.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ahe_sandbox::{ExecOpts, Sandbox};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::middleware::{compact, BuiltinMiddleware, Decision, Hook, HookInput, MiddlewareKind};
use crate::model::MiddlewareDef;
use crate::text;
use crate::tools::truncate_middle;

/// `[params]` of output_truncation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TruncationParams {
    /// A param (see the harness guide).
    pub max_chars: usize,
}
impl Default for TruncationParams {
    fn default() -> Self {
        TruncationParams { max_chars: 10_000 }
    }
}

/// `[params]` of loop_detection.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoopParams {
    /// A param (see the harness guide).
    pub max_repeats: usize,
    /// A param (see the harness guide).
    pub message: String,
}
impl Default for LoopParams {
    fn default() -> Self {
        LoopParams {
            max_repeats: 3,
            message: text::template("middleware", "loop_detection").into(),
        }
    }
}

/// `[params]` of command_guard (as written; compiled into [`Kind::Guard`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardParams {
    /// A param (see the harness guide).
    pub patterns: Vec<String>,
    #[serde(default = "default_guard_msg")]
    /// A param (see the harness guide).
    pub message: String,
    #[serde(default = "default_guard_arg")]
    /// A param (see the harness guide).
    pub argument: String,
}
fn default_guard_msg() -> String {
    text::template("middleware", "command_guard").into()
}
fn default_guard_arg() -> String {
    "command".into()
}

/// `[params]` of finish_verification.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinishParams {
    /// A param (see the harness guide).
    pub command: String,
    #[serde(default = "default_finish_timeout")]
    /// A param (see the harness guide).
    pub timeout_sec: f64,
    #[serde(default = "default_max_rejections")]
    /// A param (see the harness guide).
    pub max_rejections: u32,
    #[serde(default = "default_finish_msg")]
    /// A param (see the harness guide).
    pub message: String,
}
fn default_finish_timeout() -> f64 {
    120.0
}
fn default_max_rejections() -> u32 {
    3
}
fn default_finish_msg() -> String {
    text::template("middleware", "finish_verification").into()
}

/// `[params]` of compaction.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionParams {
    /// A param (see the harness guide).
    pub max_chars: usize,
    /// A param (see the harness guide).
    pub keep_last: usize,
}
impl Default for CompactionParams {
    fn default() -> Self {
        CompactionParams {
            max_chars: 200_000,
            keep_last: 8,
        }
    }
}

fn p<T: for<'de> Deserialize<'de>>(v: &Value) -> Result<T, String> {
    serde_json::from_value(v.clone()).map_err(|e| e.to_string())
}

/// Checks a builtin middleware's `[params]`.
pub fn check_params(kind: BuiltinMiddleware, v: &Value) -> Result<(), String> {
    match kind {
        BuiltinMiddleware::OutputTruncation => p::<TruncationParams>(v).map(|_| ()),
        BuiltinMiddleware::LoopDetection => p::<LoopParams>(v).map(|_| ()),
        BuiltinMiddleware::CommandGuard => {
            let g: GuardParams = p(v)?;
            for pat in &g.patterns {
                Regex::new(pat)
                    .map_err(|e| format!("patterns: {pat:?} is not a valid regex: {e}"))?;
            }
            Ok(())
        }
        BuiltinMiddleware::FinishVerification => p::<FinishParams>(v).map(|_| ()),
        BuiltinMiddleware::Compaction => p::<CompactionParams>(v).map(|_| ()),
    }
}

/// One enabled middleware, ready to run: its params parsed, its regexes compiled.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// Name (file stem).
    pub name: String,
    /// Hook points it runs at.
    pub hooks: Vec<Hook>,
    /// What runs.
    pub kind: Kind,
}

/// A compiled middleware implementation.
#[derive(Debug, Clone)]
pub enum Kind {
    /// output_truncation.
    Truncation(TruncationParams),
    /// loop_detection.
    Loop(LoopParams),
    /// command_guard, with its patterns compiled.
    Guard {
        /// `(pattern, regex)` in order.
        patterns: Vec<(String, Regex)>,
        /// Shown to the model, `{pattern}` filled in.
        message: String,
        /// The tool argument matched.
        argument: String,
    },
    /// finish_verification.
    Finish(FinishParams),
    /// compaction.
    Compaction(CompactionParams),
    /// `script:<path>`, run inside the sandbox.
    Script(String),
}

/// Compiles the enabled middleware of a harness (params were checked when it loaded; a
/// middleware whose params still fail is reported here, naming its file).
pub fn compile(defs: &[MiddlewareDef]) -> Result<Arc<[Compiled]>, String> {
    let mut out = Vec::new();
    for d in defs {
        let err = |e: String| format!("middleware/{}.toml: params: {e}", d.name);
        let kind = match &d.kind {
            MiddlewareKind::Script(rel) => Kind::Script(rel.clone()),
            MiddlewareKind::Builtin(b) => match b {
                BuiltinMiddleware::OutputTruncation => Kind::Truncation(p(&d.params).map_err(err)?),
                BuiltinMiddleware::LoopDetection => Kind::Loop(p(&d.params).map_err(err)?),
                BuiltinMiddleware::CommandGuard => {
                    let g: GuardParams = p(&d.params).map_err(err)?;
                    let mut patterns = Vec::new();
                    for pat in g.patterns {
                        let re = Regex::new(&pat).map_err(|e| err(e.to_string()))?;
                        patterns.push((pat, re));
                    }
                    Kind::Guard {
                        patterns,
                        message: g.message,
                        argument: g.argument,
                    }
                }
                BuiltinMiddleware::FinishVerification => Kind::Finish(p(&d.params).map_err(err)?),
                BuiltinMiddleware::Compaction => Kind::Compaction(p(&d.params).map_err(err)?),
            },
        };
        out.push(Compiled {
            name: d.name.clone(),
            hooks: d.hooks.clone(),
            kind,
        });
    }
    Ok(out.into())
}

/// Per-run state of the builtin middleware.
#[derive(Debug, Default)]
pub struct BuiltinState {
    recent_calls: Vec<String>,
    rejections: HashMap<String, u32>,
}

impl BuiltinState {
    /// What builtin `kind` (named `name`) decides at `input`.
    pub async fn decide(
        &mut self,
        name: &str,
        kind: &Kind,
        input: &HookInput<'_>,
        sb: &dyn Sandbox,
    ) -> Decision {
        match (kind, input) {
            (Kind::Truncation(pr), HookInput::AfterTool(_, _, r)) => {
                let (t, cut) = truncate_middle(&r.output, pr.max_chars);
                if cut {
                    Decision::ModifyOutput { output: t }
                } else {
                    Decision::Continue
                }
            }
            (Kind::Loop(pr), HookInput::BeforeTool(n, a)) => self.detect_loop(pr, n, a),
            (
                Kind::Guard {
                    patterns,
                    message,
                    argument,
                },
                HookInput::BeforeTool(_, a),
            ) => {
                let text = a.get(argument).and_then(Value::as_str).unwrap_or("");
                match patterns.iter().find(|(_, re)| re.is_match(text)) {
                    Some((pat, _)) => Decision::Block {
                        message: message.replace("{pattern}", pat),
                    },
                    None => Decision::Continue,
                }
            }
            (Kind::Finish(f), HookInput::OnFinish(_)) => self.verify_finish(name, f, sb).await,
            (Kind::Compaction(pr), HookInput::BeforeModel(m)) => {
                compact(m, pr.max_chars, pr.keep_last).map_or(Decision::Continue, |messages| {
                    Decision::ModifyMessages { messages }
                })
            }
            _ => Decision::Continue,
        }
    }

    /// Blocks a tool call repeated, with the same arguments, more than `max_repeats` times
    /// in a row.
    fn detect_loop(&mut self, pr: &LoopParams, n: &str, a: &Value) -> Decision {
        let key = format!("{n}:{a}");
        if self.recent_calls.last() != Some(&key) {
            self.recent_calls.clear();
        }
        self.recent_calls.push(key);
        let n = self.recent_calls.len();
        if n > pr.max_repeats.max(1) {
            Decision::Block {
                message: pr.message.replace("{n}", &n.to_string()),
            }
        } else {
            Decision::Continue
        }
    }

    /// Runs the finish check command in the sandbox and rejects the finish when it fails,
    /// at most `max_rejections` times per middleware.
    async fn verify_finish(&mut self, name: &str, f: &FinishParams, sb: &dyn Sandbox) -> Decision {
        let used = self.rejections.entry(name.to_string()).or_default();
        if *used >= f.max_rejections {
            return Decision::Continue;
        }
        let opts = ExecOpts {
            timeout: Some(Duration::from_secs_f64(f.timeout_sec)),
            ..Default::default()
        };
        let (code, output) = match sb.exec(&f.command, opts).await {
            Ok(o) if o.exit_code == Some(0) => return Decision::Continue,
            Ok(o) => (
                o.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "killed".into()),
                truncate_middle(&format!("{}{}", o.stdout, o.stderr), 4000).0,
            ),
            Err(e) => ("error".into(), e.to_string()),
        };
        *used += 1;
        Decision::RejectFinish {
            message: f
                .message
                .replace("{command}", &f.command)
                .replace("{code}", &code)
                .replace("{output}", &output),
        }
    }
}
