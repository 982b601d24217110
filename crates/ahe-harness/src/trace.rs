//! `trace.jsonl`: one JSON event per line, appended and flushed as it happens.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use ahe_model::{ToolCall, Usage};
use serde::Serialize;
use serde_json::Value;

/// One trace event.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event<'a> {
    /// The run starts.
    RunStart {
        /// Agent name (`main` or a sub-agent's).
        agent: &'a str,
        /// Model description.
        model: &'a str,
        /// Tool protocol.
        protocol: &'a str,
        /// Tool names offered.
        tools: Vec<&'a str>,
        /// Limits in force.
        limits: Value,
    },
    /// A system or user message added to the conversation.
    Message {
        /// Agent name.
        agent: &'a str,
        /// `system` or `user`.
        role: &'a str,
        /// Text.
        content: &'a str,
    },
    /// A model answer.
    Assistant {
        /// Agent name.
        agent: &'a str,
        /// Turn number (1-based).
        turn: u32,
        /// Free text.
        content: Option<&'a str>,
        /// Tool calls.
        tool_calls: &'a [ToolCall],
        /// Tokens of the call.
        usage: Usage,
        /// Cost of the call.
        cost_usd: f64,
        /// Latency.
        duration_ms: u64,
    },
    /// A tool call and its result.
    ToolCall {
        /// Agent name.
        agent: &'a str,
        /// Turn number.
        turn: u32,
        /// Call id.
        id: &'a str,
        /// Tool name.
        name: &'a str,
        /// Arguments (after middleware).
        args: &'a Value,
        /// Observation text given to the model.
        output: &'a str,
        /// Whether the tool reported success.
        ok: bool,
        /// Exit code, for commands.
        exit_code: Option<i32>,
        /// Whether output was cut.
        truncated: bool,
        /// Error text.
        error: Option<&'a str>,
        /// Run time.
        duration_ms: u64,
    },
    /// A middleware decided something other than `continue`.
    Middleware {
        /// Agent name.
        agent: &'a str,
        /// Turn number.
        turn: u32,
        /// Hook point.
        hook: &'a str,
        /// Middleware name.
        name: &'a str,
        /// The decision.
        decision: Value,
    },
    /// Something went wrong (model error, invalid call, ...).
    Error {
        /// Agent name.
        agent: &'a str,
        /// Turn number.
        turn: u32,
        /// Error class.
        kind: &'a str,
        /// Text.
        message: &'a str,
    },
    /// The run ended.
    RunEnd {
        /// Agent name.
        agent: &'a str,
        /// How it ended.
        end: &'a str,
        /// Turns taken.
        turns: u32,
        /// Tokens.
        usage: Usage,
        /// Cost.
        cost_usd: f64,
        /// Final text of the agent.
        final_message: Option<&'a str>,
    },
}

/// Appends events to `trace.jsonl` (and a readable line to `agent.log`), flushing each.
pub struct TraceWriter {
    start: Instant,
    out: Mutex<Option<Files>>,
}

/// The open files of a [`TraceWriter`].
struct Files {
    /// `trace.jsonl`.
    trace: BufWriter<File>,
    /// `agent.log`.
    log: BufWriter<File>,
    /// The buffer a trace line is serialized into (reused).
    buf: Vec<u8>,
}

#[derive(Serialize)]
struct Line<'a> {
    t_ms: u64,
    ts: String,
    #[serde(flatten)]
    event: &'a Event<'a>,
}

impl TraceWriter {
    /// Opens (appending) the event trace `trace` and the readable log `log`, making their
    /// directories (the run directory's names for them: `ahe_bench::layout::trace_files`).
    pub fn open(trace: &Path, log: &Path) -> std::io::Result<Self> {
        let open = |p: &Path| {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map(BufWriter::new)
        };
        Ok(TraceWriter {
            start: Instant::now(),
            out: Mutex::new(Some(Files {
                trace: open(trace)?,
                log: open(log)?,
                buf: Vec::new(),
            })),
        })
    }

    /// A writer that drops everything (for nested runs without their own files, and tests).
    pub fn sink() -> Self {
        TraceWriter {
            start: Instant::now(),
            out: Mutex::new(None),
        }
    }

    /// Records one event.
    pub fn emit(&self, event: &Event<'_>) {
        let mut g = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let Some(Files { trace, log, buf }) = g.as_mut() else {
            return;
        };
        let line = Line {
            t_ms: self.start.elapsed().as_millis() as u64,
            ts: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            event,
        };
        // Serialized into a reused buffer, then written whole: a line is never half written.
        buf.clear();
        if serde_json::to_writer(&mut *buf, &line).is_ok() {
            buf.push(b'\n');
            let _ = trace.write_all(buf);
            let _ = trace.flush();
        }
        // Model text must not drive the terminal of whoever reads the log.
        let _ = writeln!(log, "{}", escape_controls(&human(event)));
        let _ = log.flush();
    }
}

/// `s` with control characters written as visible escapes (C0 controls other than `\n` and
/// `\t`, and DEL, as `\x1b`; C1 controls as `\u{9b}`), so text from a model cannot move the
/// cursor, clear the screen or retitle the terminal that displays it.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            c if !bad(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// The first `n` characters of `s` on one line (newlines shown as `⏎`), `…` when cut; reads
/// only what it keeps (tool outputs can be long).
fn clip(s: &str, n: usize) -> String {
    let mut out = String::with_capacity(s.len().min(n + 8));
    for (i, c) in s.chars().enumerate() {
        if i == n {
            out.push('…');
            break;
        }
        out.push(if c == '\n' { '⏎' } else { c });
    }
    out
}

fn human(e: &Event<'_>) -> String {
    match e {
        Event::RunStart {
            agent,
            model,
            tools,
            ..
        } => {
            format!("[{agent}] start model={model} tools={}", tools.join(","))
        }
        Event::Message {
            agent,
            role,
            content,
        } => format!("[{agent}] {role}: {}", clip(content, 300)),
        Event::Assistant {
            agent,
            turn,
            content,
            tool_calls,
            ..
        } => {
            let calls: Vec<String> = tool_calls
                .iter()
                .map(|c| format!("{}({})", c.name, clip(&c.arguments.to_string(), 200)))
                .collect();
            format!(
                "[{agent}] #{turn} assistant: {} {}",
                clip(content.unwrap_or(""), 300),
                calls.join(" ")
            )
        }
        Event::ToolCall {
            agent,
            turn,
            name,
            output,
            exit_code,
            duration_ms,
            ..
        } => format!(
            "[{agent}] #{turn} {name} -> exit={} {}ms: {}",
            exit_code.map(|c| c.to_string()).unwrap_or("-".into()),
            duration_ms,
            clip(output, 300)
        ),
        Event::Middleware {
            agent,
            turn,
            hook,
            name,
            decision,
        } => {
            format!(
                "[{agent}] #{turn} middleware {name}@{hook}: {}",
                clip(&decision.to_string(), 300)
            )
        }
        Event::Error {
            agent,
            turn,
            kind,
            message,
        } => format!("[{agent}] #{turn} ERROR {kind}: {}", clip(message, 500)),
        Event::RunEnd {
            agent,
            end,
            turns,
            usage,
            cost_usd,
            ..
        } => format!(
            "[{agent}] end={end} turns={turns} tokens={} cost=${cost_usd:.4}",
            usage.total()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_n_chars_on_one_line() {
        assert_eq!(clip("a\nb", 3), "a⏎b");
        assert_eq!(clip("a\nbc", 3), "a⏎b…");
        assert_eq!(clip("héllo wörld", 5), "héllo…");
        assert_eq!(clip("", 5), "");
    }

    #[test]
    fn escape_controls_shows_terminal_controls_and_keeps_text() {
        assert_eq!(escape_controls("a\x1b[2J\x07b"), "a\\x1b[2J\\x07b");
        assert_eq!(
            escape_controls("\r\x00\x7f\u{9b}31m"),
            "\\x0d\\x00\\x7f\\u{9b}31m"
        );
        assert_eq!(escape_controls("héllo\tx\ny ⏎"), "héllo\tx\ny ⏎");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
    }

    /// A writer of `trace.jsonl` and `agent.log` in `dir`.
    fn open_in(dir: &Path) -> TraceWriter {
        TraceWriter::open(&dir.join("trace.jsonl"), &dir.join("agent.log")).unwrap()
    }

    #[test]
    fn model_text_reaches_agent_log_escaped_and_trace_exact() {
        let tmp = tempfile::tempdir().unwrap();
        let w = open_in(tmp.path());
        let evil = "ok\x1b[2J\x1b]0;pwned\x07\u{9b}1m";
        w.emit(&Event::Assistant {
            agent: "main",
            turn: 1,
            content: Some(evil),
            tool_calls: &[],
            usage: Usage::default(),
            cost_usd: 0.0,
            duration_ms: 1,
        });
        let log = std::fs::read_to_string(tmp.path().join("agent.log")).unwrap();
        assert!(
            !log.chars().any(|c| c.is_control() && c != '\n'),
            "raw control characters in agent.log: {log:?}"
        );
        assert!(
            log.contains("ok\\x1b[2J\\x1b]0;pwned\\x07\\u{9b}1m"),
            "{log}"
        );
        let trace = std::fs::read_to_string(tmp.path().join("trace.jsonl")).unwrap();
        let v: Value = serde_json::from_str(trace.trim()).unwrap();
        assert_eq!(
            v["content"].as_str(),
            Some(evil),
            "trace.jsonl keeps the exact text"
        );
    }

    #[test]
    fn every_event_is_one_json_line_and_one_log_line() {
        let tmp = tempfile::tempdir().unwrap();
        let w = open_in(tmp.path());
        let long = "line \"quoted\"\n".repeat(1000);
        let args = serde_json::json!({"command": "ls"});
        for turn in 1..=3 {
            w.emit(&Event::ToolCall {
                agent: "main",
                turn,
                id: "c1",
                name: "run_shell",
                args: &args,
                output: &long,
                ok: true,
                exit_code: Some(0),
                truncated: false,
                error: None,
                duration_ms: 5,
            });
        }
        let trace = std::fs::read_to_string(tmp.path().join("trace.jsonl")).unwrap();
        let lines: Vec<&str> = trace.lines().collect();
        assert_eq!(lines.len(), 3);
        for (i, l) in lines.iter().enumerate() {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["event"], "tool_call");
            assert_eq!(v["turn"], i as u64 + 1);
            assert_eq!(v["output"].as_str(), Some(long.as_str()));
        }
        let log = std::fs::read_to_string(tmp.path().join("agent.log")).unwrap();
        assert_eq!(log.lines().count(), 3);
        assert!(log
            .lines()
            .all(|l| l.ends_with('…') && l.chars().count() < 400));
    }
}
