//! Tool implementations: the Rust builtins and script tools run inside the sandbox.

use std::time::Duration;

use ahe_sandbox::{ExecOpts, Sandbox};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::model::{Harness, ToolDef};
use crate::text;
use minijinja::context;

pub use crate::model::{BuiltinTool, ToolImpl};

/// What a tool answers (docs/harness.md#tools); scripts print it as JSON on stdout.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// Whether the call did what was asked.
    pub ok: bool,
    /// Main output.
    #[serde(default)]
    pub output: String,
    /// Error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// One-line summary (for traces and reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Exit code of the command, for command-like tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Whether output was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// What the agent could do next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_hint: Option<String>,
}

impl ToolResult {
    /// A failed result with an error and a hint.
    pub fn fail(error: impl Into<String>, hint: Option<&str>) -> Self {
        ToolResult {
            ok: false,
            error: Some(error.into()),
            recovery_hint: hint.map(Into::into),
            ..Default::default()
        }
    }
    /// A successful result.
    pub fn ok(output: impl Into<String>) -> Self {
        ToolResult {
            ok: true,
            output: output.into(),
            ..Default::default()
        }
    }
    /// The observation text the model sees.
    pub fn observation(&self) -> String {
        let mut s = self.output.clone();
        let mut add = |line: String| {
            if !s.is_empty() && !s.ends_with('\n') {
                s.push('\n');
            }
            s.push_str(&line);
        };
        if let Some(c) = self.exit_code {
            add(text::say(
                "observation",
                "exit_code",
                context! { code => c },
            ));
        }
        if let Some(e) = &self.error {
            add(text::say("observation", "error", context! { error => e }));
        }
        if let Some(h) = &self.recovery_hint {
            add(text::say("observation", "hint", context! { hint => h }));
        }
        if s.is_empty() {
            s.push_str(&text::say("observation", "empty", context! {}));
        }
        s
    }
}

/// Keeps the head (40%) and tail (60%) of `s` within `max` characters and says what was cut.
pub fn truncate_middle(s: &str, max: usize) -> (String, bool) {
    let n = s.chars().count();
    if n <= max {
        return (s.to_string(), false);
    }
    let head = max * 2 / 5;
    let tail = max - head;
    let h: String = s.chars().take(head).collect();
    let t: String = s.chars().skip(n - tail).collect();
    let cut = n - head - tail;
    (
        format!(
            "{h}\n{}\n{t}",
            text::say("observation", "truncated", context! { cut, total => n })
        ),
        true,
    )
}

/// Quotes a string for bash.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ShellParams {
    timeout_sec: f64,
    max_output_chars: usize,
}
impl Default for ShellParams {
    fn default() -> Self {
        ShellParams {
            timeout_sec: 120.0,
            max_output_chars: 30_000,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ScriptParams {
    timeout_sec: f64,
}
impl Default for ScriptParams {
    fn default() -> Self {
        ScriptParams { timeout_sec: 120.0 }
    }
}

fn params<T: for<'de> Deserialize<'de>>(v: &Value) -> Result<T, String> {
    serde_json::from_value(v.clone()).map_err(|e| e.to_string())
}

/// Checks a builtin tool's `[params]`.
pub fn check_params(kind: BuiltinTool, v: &Value) -> Result<(), String> {
    match kind {
        BuiltinTool::Shell | BuiltinTool::ReadFile => params::<ShellParams>(v).map(|_| ()),
        _ if v.as_object().is_some_and(|m| m.is_empty()) => Ok(()),
        _ => Err("this builtin takes no params".into()),
    }
}

/// Where script tools and script middleware are copied inside the sandbox.
pub const SCRIPT_ROOT: &str = "/tmp/.ahe-harness";

/// The command that runs a harness script copied to the sandbox.
pub fn script_command(rel: &str) -> String {
    let p = sh_quote(&format!("{SCRIPT_ROOT}/{rel}"));
    match rel.rsplit('.').next() {
        Some("py") => format!("python3 {p}"),
        Some("sh") | Some("bash") => format!("bash {p}"),
        _ => format!("chmod +x {p} 2>/dev/null; {p}"),
    }
}

fn exec_opts(timeout: Duration, stdin: Option<Vec<u8>>) -> ExecOpts {
    ExecOpts {
        timeout: Some(timeout),
        stdin,
        ..Default::default()
    }
}

fn str_arg<'a>(args: &'a Value, k: &str) -> &'a str {
    args.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Runs a builtin file or shell tool; `budget` caps its run time.
pub async fn run_builtin(
    kind: BuiltinTool,
    def: &ToolDef,
    args: &Value,
    sb: &dyn Sandbox,
    harness: &Harness,
    budget: Duration,
) -> ToolResult {
    match kind {
        BuiltinTool::Shell => run_shell(def, args, sb, budget).await,
        BuiltinTool::ReadFile => read_file(def, args, sb, budget).await,
        BuiltinTool::WriteFile => {
            let path = str_arg(args, "path");
            let content = str_arg(args, "content");
            write_file(sb, path, content, budget).await
        }
        BuiltinTool::EditFile => edit_file(sb, args, budget).await,
        BuiltinTool::LoadSkill => load_skill(harness, args),
        BuiltinTool::Finish | BuiltinTool::Delegate => {
            ToolResult::fail("handled by the runtime", None)
        }
    }
}

/// The failed result a builtin answers when the sandbox itself errs (the agent may retry).
fn sandbox_err(e: ahe_sandbox::SandboxError) -> ToolResult {
    ToolResult::fail(
        text::say(
            "tools",
            "sandbox_error",
            context! { error => e.to_string() },
        ),
        Some(&text::say("tools", "retry", context! {})),
    )
}

/// The shell builtin: runs `command` (its timeout asked, else the tool's, capped by
/// `budget`), stdout then stderr, cut in the middle to `max_output_chars`.
async fn run_shell(def: &ToolDef, args: &Value, sb: &dyn Sandbox, budget: Duration) -> ToolResult {
    let p: ShellParams = params(&def.params).unwrap_or_default();
    let asked = args.get("timeout_sec").and_then(Value::as_f64);
    let secs = asked.unwrap_or(p.timeout_sec).max(1.0);
    let timeout = Duration::from_secs_f64(secs).min(budget);
    let cmd = str_arg(args, "command");
    match sb.exec(cmd, exec_opts(timeout, None)).await {
        Err(e) => sandbox_err(e),
        Ok(o) => {
            let mut text = o.stdout;
            if !o.stderr.is_empty() {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&o.stderr);
            }
            let (output, cut) = truncate_middle(&text, p.max_output_chars);
            let mut r = ToolResult {
                ok: o.exit_code == Some(0),
                output,
                exit_code: o.exit_code,
                truncated: cut.then_some(true),
                ..Default::default()
            };
            if o.timed_out {
                let secs = format!("{:.0}", timeout.as_secs_f64());
                r.error = Some(text::say("tools", "timed_out", context! { secs }));
                r.recovery_hint = Some(text::say("tools", "timed_out_hint", context! {}));
            }
            r
        }
    }
}

/// The read_file builtin: `cat`s the file, or `sed`s the asked line range, cut in the middle
/// to `max_output_chars` with a hint to read a range.
async fn read_file(def: &ToolDef, args: &Value, sb: &dyn Sandbox, budget: Duration) -> ToolResult {
    let p: ShellParams = params(&def.params).unwrap_or_default();
    let path = str_arg(args, "path");
    let start = args.get("start_line").and_then(Value::as_u64);
    let end = args.get("end_line").and_then(Value::as_u64);
    let q = sh_quote(path);
    let cmd = match (start, end) {
        (None, None) => format!("cat -- {q}"),
        (s, e) => format!(
            "sed -n '{},{}p' -- {q}",
            s.unwrap_or(1).max(1),
            e.map(|x| x.to_string()).unwrap_or("$".into())
        ),
    };
    match sb
        .exec(&cmd, exec_opts(budget.min(Duration::from_secs(60)), None))
        .await
    {
        Err(e) => sandbox_err(e),
        Ok(o) if o.exit_code != Some(0) => ToolResult::fail(
            text::say(
                "tools",
                "cannot_read",
                context! { path, error => o.stderr.trim() },
            ),
            Some(&text::say("tools", "check_path", context! {})),
        ),
        Ok(o) => {
            let (output, cut) = truncate_middle(&o.stdout, p.max_output_chars);
            ToolResult {
                ok: true,
                output,
                truncated: cut.then_some(true),
                recovery_hint: cut.then(|| text::say("tools", "read_range", context! {})),
                ..Default::default()
            }
        }
    }
}

/// The load_skill builtin: the named skill's body, or the names of the skills there are.
fn load_skill(harness: &Harness, args: &Value) -> ToolResult {
    let name = str_arg(args, "name");
    match harness.skills.iter().find(|s| s.name == name) {
        Some(s) => ToolResult::ok(s.body.clone()),
        None => {
            let names: Vec<&str> = harness.skills.iter().map(|s| s.name.as_str()).collect();
            ToolResult::fail(
                text::say("tools", "no_skill", context! { name }),
                Some(&text::say("tools", "available_skills", context! { names })),
            )
        }
    }
}

async fn write_file(sb: &dyn Sandbox, path: &str, content: &str, budget: Duration) -> ToolResult {
    let q = sh_quote(path);
    let cmd = format!("mkdir -p -- \"$(dirname -- {q})\" && cat > {q}");
    let opts = exec_opts(
        budget.min(Duration::from_secs(60)),
        Some(content.as_bytes().to_vec()),
    );
    match sb.exec(&cmd, opts).await {
        Err(e) => ToolResult::fail(
            text::say(
                "tools",
                "sandbox_error",
                context! { error => e.to_string() },
            ),
            None,
        ),
        Ok(o) if o.exit_code == Some(0) => ToolResult::ok(text::say(
            "tools",
            "wrote",
            context! { bytes => content.len(), path },
        )),
        Ok(o) => ToolResult::fail(
            text::say(
                "tools",
                "cannot_write",
                context! { path, error => o.stderr.trim() },
            ),
            None,
        ),
    }
}

async fn edit_file(sb: &dyn Sandbox, args: &Value, budget: Duration) -> ToolResult {
    let path = str_arg(args, "path");
    let old = str_arg(args, "old_text");
    let new = str_arg(args, "new_text");
    let all = args
        .get("replace_all")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if old.is_empty() {
        return ToolResult::fail(
            "old_text is empty",
            Some("copy the exact text to replace from the file"),
        );
    }
    let opts = exec_opts(budget.min(Duration::from_secs(60)), None);
    let text = match sb.exec(&format!("cat -- {}", sh_quote(path)), opts).await {
        Err(e) => {
            let error = e.to_string();
            return ToolResult::fail(
                text::say("tools", "sandbox_error", context! { error }),
                None,
            );
        }
        Ok(o) if o.exit_code != Some(0) => {
            return ToolResult::fail(
                text::say(
                    "tools",
                    "cannot_read",
                    context! { path, error => o.stderr.trim() },
                ),
                Some("check the path with ls"),
            )
        }
        Ok(o) => o.stdout,
    };
    let n = text.matches(old).count();
    if n == 0 {
        return ToolResult::fail(
            text::say("tools", "old_not_found", context! { path }),
            Some(&text::say("tools", "old_not_found_hint", context! {})),
        );
    }
    if n > 1 && !all {
        return ToolResult::fail(
            text::say("tools", "old_ambiguous", context! { n, path }),
            Some(&text::say("tools", "old_ambiguous_hint", context! {})),
        );
    }
    let updated = text.replace(old, new);
    let mut r = write_file(sb, path, &updated, budget).await;
    if r.ok {
        r.output = text::say("tools", "replaced", context! { n, path });
    }
    r
}

/// Runs a script tool inside the sandbox: JSON arguments on stdin, a ToolResult JSON on stdout.
pub async fn run_script(
    def: &ToolDef,
    rel: &str,
    args: &Value,
    sb: &dyn Sandbox,
    budget: Duration,
) -> ToolResult {
    let p: ScriptParams = params(&def.params).unwrap_or_default();
    let timeout = Duration::from_secs_f64(p.timeout_sec).min(budget);
    let stdin = serde_json::to_vec(args).unwrap_or_default();
    match sb
        .exec(&script_command(rel), exec_opts(timeout, Some(stdin)))
        .await
    {
        Err(e) => ToolResult::fail(
            text::say(
                "tools",
                "sandbox_error",
                context! { error => e.to_string() },
            ),
            None,
        ),
        Ok(o) if o.timed_out => {
            let secs = format!("{:.0}", timeout.as_secs_f64());
            let ctx = context! { name => &def.name, secs };
            ToolResult::fail(text::say("tools", "script_timed_out", ctx), None)
        }
        Ok(o) => parse_script_json::<ToolResult>(&o.stdout).unwrap_or_else(|| {
            let (tail, _) = truncate_middle(&format!("{}{}", o.stdout, o.stderr), 2000);
            ToolResult {
                ok: false,
                output: tail,
                error: Some(text::say(
                    "tools",
                    "script_no_json",
                    context! {
                        name => &def.name,
                        code => o.exit_code.map_or("none".to_string(), |c| c.to_string()),
                    },
                )),
                exit_code: o.exit_code,
                ..Default::default()
            }
        }),
    }
}

/// Parses a script's JSON answer: the whole stdout, else its last non-empty line.
pub fn parse_script_json<T: for<'de> Deserialize<'de>>(stdout: &str) -> Option<T> {
    serde_json::from_str(stdout.trim()).ok().or_else(|| {
        stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| serde_json::from_str(l.trim()).ok())
    })
}

/// The arguments error observation for a call that does not match its schema.
pub fn invalid_args(name: &str, errors: &[String], schema: &Value) -> ToolResult {
    ToolResult {
        ok: false,
        error: Some(text::say(
            "tools",
            "invalid_args",
            context! { name, errors },
        )),
        recovery_hint: Some(text::say(
            "tools",
            "invalid_args_hint",
            context! { name, schema => json!(schema).to_string() },
        )),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_head_and_tail_and_says_so() {
        let s: String = (0..1000).map(|i| format!("{i:04}\n")).collect();
        let (t, cut) = truncate_middle(&s, 500);
        assert!(cut);
        assert!(t.starts_with("0000\n"));
        assert!(t.ends_with("0999\n"));
        assert!(t.contains("characters cut from the middle"));
        assert!(t.len() < 700);
        let (t, cut) = truncate_middle("short", 500);
        assert_eq!((t.as_str(), cut), ("short", false));
    }

    #[test]
    fn impl_parse_names_the_choices() {
        assert_eq!(
            ToolImpl::parse("builtin:shell"),
            Ok(ToolImpl::Builtin(BuiltinTool::Shell))
        );
        assert_eq!(
            ToolImpl::parse("script:tools/x.py"),
            Ok(ToolImpl::Script("tools/x.py".into()))
        );
        assert!(ToolImpl::parse("builtin:nope")
            .unwrap_err()
            .contains("read_file"));
        assert!(ToolImpl::parse("x").is_err());
    }

    #[test]
    fn observation_lists_exit_error_hint() {
        let r = ToolResult {
            ok: false,
            output: "out".into(),
            exit_code: Some(2),
            error: Some("bad".into()),
            recovery_hint: Some("try".into()),
            ..Default::default()
        };
        assert_eq!(
            r.observation(),
            "out\n[exit code: 2]\n[error] bad\n[hint] try"
        );
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
    }

    #[test]
    fn script_json_from_last_line() {
        let r: ToolResult = parse_script_json("noise\n{\"ok\":true,\"output\":\"x\"}\n").unwrap();
        assert!(r.ok);
        assert!(parse_script_json::<ToolResult>("nothing").is_none());
    }
}
