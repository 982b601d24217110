//! Middleware: hook points, decisions, the builtin kinds, and script middleware.

use std::sync::Arc;
use std::time::Duration;

use ahe_model::Message;
use ahe_sandbox::{ExecOpts, Sandbox};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::text;
use crate::tools::{parse_script_json, script_command, ToolResult};
use builtin_mw::{BuiltinState, Compiled, Kind};
use minijinja::context;

pub mod builtin_mw;

pub use crate::model::{BuiltinMiddleware, Hook, MiddlewareKind};

/// What a hook decided.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Decision {
    /// Go on unchanged.
    Continue,
    /// New tool arguments (before_tool).
    ModifyArgs {
        /// Replacement arguments.
        args: Value,
    },
    /// New tool output (after_tool).
    ModifyOutput {
        /// Replacement output.
        output: String,
    },
    /// New conversation (before_model).
    ModifyMessages {
        /// Replacement messages.
        messages: Vec<Message>,
    },
    /// Do not run the call / discard the answer; the model sees the message.
    Block {
        /// Shown to the model.
        message: String,
    },
    /// Refuse to finish; the loop goes on with the message.
    RejectFinish {
        /// Shown to the model.
        message: String,
    },
}

/// Script middleware's answer on stdout.
#[derive(Deserialize)]
struct ScriptDecision {
    action: String,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    #[serde(default)]
    message: Option<String>,
}

/// What a hook is given.
pub enum HookInput<'a> {
    /// Messages about to be sent.
    BeforeModel(&'a [Message]),
    /// The model's answer text and calls.
    AfterModel(&'a ahe_model::ChatResponse),
    /// Tool name and arguments.
    BeforeTool(&'a str, &'a Value),
    /// Tool name, arguments, result.
    AfterTool(&'a str, &'a Value, &'a ToolResult),
    /// The finish summary.
    OnFinish(&'a str),
}

impl HookInput<'_> {
    /// The hook's name, as in harness files and traces.
    pub fn name(&self) -> &'static str {
        match self {
            HookInput::BeforeModel(_) => "before_model",
            HookInput::AfterModel(_) => "after_model",
            HookInput::BeforeTool(..) => "before_tool",
            HookInput::AfterTool(..) => "after_tool",
            HookInput::OnFinish(_) => "on_finish",
        }
    }

    fn hook(&self) -> Hook {
        match self {
            HookInput::BeforeModel(_) => Hook::BeforeModel,
            HookInput::AfterModel(_) => Hook::AfterModel,
            HookInput::BeforeTool(..) => Hook::BeforeTool,
            HookInput::AfterTool(..) => Hook::AfterTool,
            HookInput::OnFinish(_) => Hook::OnFinish,
        }
    }
    fn to_json(&self) -> Value {
        match self {
            HookInput::BeforeModel(m) => json!({"hook": "before_model", "messages": m}),
            HookInput::AfterModel(r) => {
                json!({"hook": "after_model", "content": r.content, "tool_calls": r.tool_calls})
            }
            HookInput::BeforeTool(n, a) => json!({"hook": "before_tool", "tool": n, "args": a}),
            HookInput::AfterTool(n, a, r) => {
                json!({"hook": "after_tool", "tool": n, "args": a, "result": r})
            }
            HookInput::OnFinish(s) => json!({"hook": "on_finish", "summary": s}),
        }
    }
}

/// The enabled middleware of one agent run, with their per-run state.
pub struct Stack {
    mws: Arc<[Compiled]>,
    state: BuiltinState,
}

/// The combined effect of one hook's decisions, applied by the loop in one place.
#[derive(Debug, Default)]
pub struct Applied {
    /// Replacement tool arguments (before_tool).
    pub args: Option<Value>,
    /// Replacement tool output (after_tool) or answer text (after_model).
    pub output: Option<String>,
    /// Replacement conversation (before_model, after_model).
    pub messages: Option<Vec<Message>>,
    /// The call or answer is blocked: (middleware, message shown to the model).
    pub block: Option<(String, String)>,
    /// The finish is refused, with the message shown to the model.
    pub reject: Option<String>,
}

impl Applied {
    /// Folds a hook's decisions (modifications chain: the last one wins).
    pub fn of(decisions: &[(String, Decision)]) -> Applied {
        let mut a = Applied::default();
        for (name, d) in decisions {
            match d {
                Decision::Continue => {}
                Decision::ModifyArgs { args } => a.args = Some(args.clone()),
                Decision::ModifyOutput { output } => a.output = Some(output.clone()),
                Decision::ModifyMessages { messages } => a.messages = Some(messages.clone()),
                Decision::Block { message } => a.block = Some((name.clone(), message.clone())),
                Decision::RejectFinish { message } => a.reject = Some(message.clone()),
            }
        }
        a
    }
}

impl Stack {
    /// A stack over a runtime's compiled middleware, with fresh per-run state.
    pub fn new(mws: Arc<[Compiled]>) -> Self {
        Stack {
            mws,
            state: BuiltinState::default(),
        }
    }

    /// Runs every middleware registered for the input's hook, in order; returns each
    /// non-`continue` decision with the middleware's name (a block or reject ends the
    /// hook; modifications chain: later middleware see earlier changes).
    pub async fn run(&mut self, input: HookInput<'_>, sb: &dyn Sandbox) -> Vec<(String, Decision)> {
        let hook = input.hook();
        let mut out = Vec::new();
        let mws = self.mws.clone();
        let mut args_over: Option<Value> = None;
        let mut output_over: Option<ToolResult> = None;
        let mut msgs_over: Option<Vec<Message>> = None;
        for d in mws.iter().filter(|d| d.hooks.contains(&hook)) {
            let cur = match (&input, &args_over, &output_over, &msgs_over) {
                (HookInput::BeforeTool(n, _), Some(a), _, _) => HookInput::BeforeTool(n, a),
                (HookInput::AfterTool(n, a, _), _, Some(r), _) => HookInput::AfterTool(n, a, r),
                (HookInput::BeforeModel(_), _, _, Some(m)) => HookInput::BeforeModel(m),
                (i, ..) => i.reborrow(),
            };
            let dec = match &d.kind {
                Kind::Script(rel) => script(rel, &cur, sb).await,
                k => self.state.decide(&d.name, k, &cur, sb).await,
            };
            match &dec {
                Decision::Continue => continue,
                Decision::ModifyArgs { args } => args_over = Some(args.clone()),
                Decision::ModifyOutput { output } => {
                    if let HookInput::AfterTool(_, _, r) = &cur {
                        output_over = Some(ToolResult {
                            output: output.clone(),
                            ..(*r).clone()
                        });
                    }
                }
                Decision::ModifyMessages { messages } => msgs_over = Some(messages.clone()),
                Decision::Block { .. } | Decision::RejectFinish { .. } => {
                    out.push((d.name.clone(), dec));
                    return out;
                }
            }
            out.push((d.name.clone(), dec));
        }
        out
    }
}

impl HookInput<'_> {
    fn reborrow(&self) -> HookInput<'_> {
        match self {
            HookInput::BeforeModel(m) => HookInput::BeforeModel(m),
            HookInput::AfterModel(r) => HookInput::AfterModel(r),
            HookInput::BeforeTool(n, a) => HookInput::BeforeTool(n, a),
            HookInput::AfterTool(n, a, r) => HookInput::AfterTool(n, a, r),
            HookInput::OnFinish(s) => HookInput::OnFinish(s),
        }
    }
}

/// Total characters of a conversation.
pub fn conversation_chars(m: &[Message]) -> usize {
    m.iter()
        .map(|x| {
            x.text().len()
                + match x {
                    Message::Assistant { tool_calls, .. } => tool_calls
                        .iter()
                        .map(|c| c.arguments.to_string().len())
                        .sum(),
                    _ => 0,
                }
        })
        .sum()
}

/// Elides the oldest tool outputs (never the system prompt, the task, or the last
/// `keep_last` messages) until the conversation fits in `max_chars`; None when it fits.
pub fn compact(m: &[Message], max_chars: usize, keep_last: usize) -> Option<Vec<Message>> {
    let mut total = conversation_chars(m);
    if total <= max_chars {
        return None;
    }
    let mut out = m.to_vec();
    let stop = out.len().saturating_sub(keep_last);
    for msg in out.iter_mut().take(stop).skip(2) {
        if total <= max_chars {
            break;
        }
        if let Message::Tool { content, .. } | Message::User { content } = msg {
            if content.len() > 200 {
                let note = text::say(
                    "middleware",
                    "compaction_note",
                    context! { chars => content.len() },
                );
                total = total - content.len() + note.len();
                *content = note;
            }
        }
    }
    Some(out)
}

async fn script(rel: &str, input: &HookInput<'_>, sb: &dyn Sandbox) -> Decision {
    let stdin = serde_json::to_vec(&input.to_json()).unwrap_or_default();
    let opts = ExecOpts {
        stdin: Some(stdin),
        timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let Ok(o) = sb.exec(&script_command(rel), opts).await else {
        return Decision::Continue;
    };
    let Some(d) = parse_script_json::<ScriptDecision>(&o.stdout) else {
        tracing::warn!("middleware script {rel} printed no decision JSON; continuing");
        return Decision::Continue;
    };
    let msg = d.message.unwrap_or_default();
    match d.action.as_str() {
        "block" => Decision::Block { message: msg },
        "reject_finish" => Decision::RejectFinish { message: msg },
        "modify" => match (d.args, d.output, d.messages) {
            (Some(args), _, _) => Decision::ModifyArgs { args },
            (_, Some(output), _) => Decision::ModifyOutput { output },
            (_, _, Some(messages)) => Decision::ModifyMessages { messages },
            _ => Decision::Continue,
        },
        _ => Decision::Continue,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin_mw::check_params;

    #[test]
    fn compaction_elides_old_outputs_only() {
        let big = "x".repeat(5000);
        let mut m = vec![Message::system("sys"), Message::user("task")];
        for i in 0..6 {
            m.push(Message::Tool {
                tool_call_id: format!("{i}"),
                name: "s".into(),
                content: big.clone(),
            });
        }
        assert!(compact(&m, 100_000, 2).is_none());
        let c = compact(&m, 12_000, 2).unwrap();
        assert_eq!(c[0], m[0]);
        assert_eq!(c[1], m[1]);
        assert!(c[2].text().contains("elided"));
        assert_eq!(c[7].text(), big);
        assert!(conversation_chars(&c) <= 12_000 + 200);
    }

    #[test]
    fn params_are_checked() {
        assert!(
            check_params(BuiltinMiddleware::CommandGuard, &json!({"patterns": ["("]}))
                .unwrap_err()
                .contains("regex")
        );
        assert!(check_params(BuiltinMiddleware::CommandGuard, &json!({})).is_err());
        assert!(check_params(
            BuiltinMiddleware::FinishVerification,
            &json!({"command": "true"})
        )
        .is_ok());
        assert!(
            check_params(BuiltinMiddleware::OutputTruncation, &json!({"max": 1}))
                .unwrap_err()
                .contains("max")
        );
        assert!(MiddlewareKind::parse("builtin:nope")
            .unwrap_err()
            .contains("command_guard"));
    }
}
