//! The action format of the local model and the GBNF grammar that admits only it.
//!
//! A reply is one JSON object in a fixed layout (`": "` after keys, `", "` between members):
//! `{"tool": "NAME", "args": {...}}` for one of the offered tools, with the arguments
//! generated from the tool's JSON Schema, or `{"answer": "..."}` when the model is done.
//! [`format_action`] writes the same layout, so an earlier action re-rendered into the
//! conversation tokenizes like the one the model produced (the KV cache prefix stays valid).

use std::fmt::Write as _;

use serde_json::Value;

use crate::types::ToolSpec;

/// The key of the final-answer object (`{"answer": "..."}`).
pub const ANSWER_KEY: &str = "answer";

/// Builds the grammar of one reply: an action for one of `tools`, or (with `allow_answer`)
/// the final-answer object.
pub fn action_grammar(tools: &[ToolSpec], allow_answer: bool) -> String {
    let mut g = Gen::default();
    let mut alts: Vec<String> = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let args = g.value(&t.input_schema, &format!("t{i}"), 0);
        let name = format!("t{i}");
        let head = format!("\"tool\": {}, \"args\": ", json_str(&t.name));
        g.rules
            .push((name.clone(), format!("{} {args}", lit(&head))));
        alts.push(name);
    }
    if allow_answer {
        g.uses_string = true;
        alts.push(format!("{} string", lit(&format!("\"{ANSWER_KEY}\": "))));
    }
    if alts.is_empty() {
        alts.push(lit("\"answer\": ") + " string");
        g.uses_string = true;
    }
    let mut out = format!("root ::= \"{{\" ( {} ) \"}}\"\n", alts.join(" | "));
    for (name, body) in &g.rules {
        let _ = writeln!(out, "{name} ::= {body}");
    }
    out.push_str(&g.base_rules());
    out
}

/// Writes an action in the grammar's layout: `{"tool": "NAME", "args": ARGS}`.
pub fn format_action(name: &str, args: &Value) -> String {
    format!(
        "{{\"tool\": {}, \"args\": {}}}",
        json_str(name),
        format_value(args)
    )
}

/// Writes a final answer in the grammar's layout: `{"answer": "TEXT"}`.
pub fn format_answer(text: &str) -> String {
    format!("{{\"{ANSWER_KEY}\": {}}}", json_str(text))
}

/// A JSON value in the grammar's layout (`": "` and `", "` separators, no newlines).
pub fn format_value(v: &Value) -> String {
    match v {
        Value::Object(m) if m.is_empty() => "{}".into(),
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}: {}", json_str(k), format_value(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Array(a) if a.is_empty() => "[]".into(),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(format_value).collect();
            format!("[{}]", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// What a reply in the action format says.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A tool call.
    Action {
        /// Tool name.
        tool: String,
        /// Arguments.
        args: Value,
    },
    /// The final answer.
    Answer(String),
    /// Anything else (cut off, or an unconstrained model's prose).
    Other,
}

/// Reads a reply written in the action format.
pub fn parse_reply(text: &str) -> Reply {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(text.trim()) else {
        return Reply::Other;
    };
    if let Some(Value::String(tool)) = m.get("tool") {
        let args = m
            .get("args")
            .or_else(|| m.get("arguments"))
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        return Reply::Action {
            tool: tool.clone(),
            args,
        };
    }
    match m.get(ANSWER_KEY) {
        Some(Value::String(a)) => Reply::Answer(a.clone()),
        _ => Reply::Other,
    }
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// A GBNF string literal matching exactly `s`.
fn lit(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Rules generated so far, and which shared base rules they use.
#[derive(Default)]
struct Gen {
    rules: Vec<(String, String)>,
    uses_string: bool,
    uses_value: bool,
}

/// Nesting depth after which a schema is matched by the generic JSON value rule.
const MAX_DEPTH: usize = 6;

impl Gen {
    /// A GBNF expression for values of `schema`; `hint` names helper rules.
    fn value(&mut self, schema: &Value, hint: &str, depth: usize) -> String {
        if depth > MAX_DEPTH {
            return self.generic();
        }
        let Some(s) = schema.as_object() else {
            return self.generic();
        };
        if let Some(c) = s.get("const") {
            return lit(&format_value(c));
        }
        if let Some(Value::Array(e)) = s.get("enum") {
            if !e.is_empty() {
                let alts: Vec<String> = e.iter().map(|v| lit(&format_value(v))).collect();
                return format!("( {} )", alts.join(" | "));
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(subs)) = s.get(key) {
                if !subs.is_empty() {
                    let alts: Vec<String> = subs
                        .iter()
                        .enumerate()
                        .map(|(i, sub)| self.value(sub, &format!("{hint}-{i}"), depth + 1))
                        .collect();
                    return format!("( {} )", alts.join(" | "));
                }
            }
        }
        match s.get("type") {
            Some(Value::String(t)) => self.typed(t, s, hint, depth),
            Some(Value::Array(ts)) if !ts.is_empty() => {
                let alts: Vec<String> = ts
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|t| self.typed(t, s, hint, depth))
                    .collect();
                format!("( {} )", alts.join(" | "))
            }
            _ if s.contains_key("properties") => self.typed("object", s, hint, depth),
            _ => self.generic(),
        }
    }

    fn typed(
        &mut self,
        t: &str,
        s: &serde_json::Map<String, Value>,
        hint: &str,
        depth: usize,
    ) -> String {
        match t {
            "string" => {
                self.uses_string = true;
                "string".into()
            }
            "integer" => "integer".into(),
            "number" => "number".into(),
            "boolean" => "( \"true\" | \"false\" )".into(),
            "null" => "\"null\"".into(),
            "array" => {
                let item = match s.get("items") {
                    Some(i) => self.value(i, &format!("{hint}-i"), depth + 1),
                    None => self.generic(),
                };
                let name = format!("{hint}-arr");
                self.rules.push((
                    name.clone(),
                    format!("\"[\" ( {item} ( \", \" {item} )* )? \"]\""),
                ));
                name
            }
            "object" => self.object(s, hint, depth),
            _ => self.generic(),
        }
    }

    /// An object with its declared properties, in declaration order: the required ones
    /// always, the optional ones each maybe. Without declared properties: any object.
    fn object(&mut self, s: &serde_json::Map<String, Value>, hint: &str, depth: usize) -> String {
        let props = match s.get("properties").and_then(Value::as_object) {
            Some(p) if !p.is_empty() => p,
            _ if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                return lit("{}");
            }
            _ => {
                self.uses_value = true;
                return "object".into();
            }
        };
        let required: Vec<&str> = s
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut items: Vec<(String, bool)> = Vec::new();
        for (i, (k, sub)) in props.iter().enumerate() {
            let v = self.value(sub, &format!("{hint}-p{i}"), depth + 1);
            let kv = format!("{}: ", json_str(k));
            items.push((format!("{} {v}", lit(&kv)), required.contains(&k.as_str())));
        }
        let tail = |from: usize| -> String {
            items[from..]
                .iter()
                .map(|(kv, req)| {
                    if *req {
                        format!("\", \" {kv}")
                    } else {
                        format!("( \", \" {kv} )?")
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let first_req = items.iter().position(|(_, r)| *r);
        let last_first = first_req.unwrap_or(items.len() - 1);
        let alts: Vec<String> = (0..=last_first)
            .map(|j| {
                let t = tail(j + 1);
                if t.is_empty() {
                    items[j].0.clone()
                } else {
                    format!("{} {t}", items[j].0)
                }
            })
            .collect();
        let body = if first_req.is_some() {
            format!("( {} )", alts.join(" | "))
        } else {
            format!("( {} )?", alts.join(" | "))
        };
        let name = format!("{hint}-obj");
        self.rules
            .push((name.clone(), format!("\"{{\" {body} \"}}\"")));
        name
    }

    fn generic(&mut self) -> String {
        self.uses_value = true;
        "value".into()
    }

    /// The shared rules (strings, numbers, generic JSON) the generated rules refer to.
    fn base_rules(&self) -> String {
        let mut o = String::new();
        o.push_str("integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n");
        o.push_str(
            "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n",
        );
        if self.uses_string || self.uses_value {
            o.push_str("string ::= \"\\\"\" char* \"\\\"\"\n");
            o.push_str(
                "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n",
            );
        }
        if self.uses_value {
            o.push_str(
                "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n",
            );
            o.push_str(
                "object ::= \"{\" ( string \": \" value ( \", \" string \": \" value )* )? \"}\"\n",
            );
            o.push_str("array ::= \"[\" ( value ( \", \" value )* )? \"]\"\n");
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shell() -> ToolSpec {
        ToolSpec {
            name: "run_shell".into(),
            description: "Run a command".into(),
            input_schema: json!({"type": "object", "required": ["command"],
                "properties": {"command": {"type": "string"}}}),
        }
    }

    #[test]
    fn grammar_has_one_alternative_per_tool_and_the_answer() {
        let read = ToolSpec {
            name: "read_file".into(),
            description: "".into(),
            input_schema: json!({"type": "object", "required": ["path"], "properties": {
                "path": {"type": "string"}, "start_line": {"type": "integer"},
                "end_line": {"type": "integer"}}}),
        };
        let g = action_grammar(&[shell(), read], true);
        assert!(
            g.starts_with("root ::= \"{\" ( t0 | t1 | \"\\\"answer\\\": \" string ) \"}\""),
            "{g}"
        );
        assert!(
            g.contains("t0 ::= \"\\\"tool\\\": \\\"run_shell\\\", \\\"args\\\": \" t0-obj"),
            "{g}"
        );
        // Optional properties before the required one may be absent; `path` may not.
        assert!(g.contains("\"\\\"path\\\": \" string"), "{g}");
        assert!(g.contains("integer ::="), "{g}");
    }

    #[test]
    fn objects_with_only_optional_members_may_be_empty() {
        let t = ToolSpec {
            name: "list_files".into(),
            description: "".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        };
        let g = action_grammar(&[t], false);
        assert!(
            g.contains("t0-obj ::= \"{\" ( \"\\\"path\\\": \" string )? \"}\""),
            "{g}"
        );
    }

    #[test]
    fn a_closed_object_without_properties_is_empty_and_an_open_one_is_any_object() {
        let closed = ToolSpec {
            name: "list_trials".into(),
            description: "".into(),
            input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        };
        let g = action_grammar(std::slice::from_ref(&closed), false);
        assert!(
            g.contains("t0 ::= \"\\\"tool\\\": \\\"list_trials\\\", \\\"args\\\": \" \"{}\""),
            "{g}"
        );
        assert!(!g.contains("value ::="), "{g}");
        let open = ToolSpec {
            input_schema: json!({"type": "object", "properties": {}}),
            ..closed
        };
        assert!(action_grammar(&[open], false).contains("value ::="));
    }

    #[test]
    fn format_and_parse_roundtrip() {
        let a = format_action("run_shell", &json!({"command": "ls -la\n", "n": 2}));
        assert_eq!(
            a,
            r#"{"tool": "run_shell", "args": {"command": "ls -la\n", "n": 2}}"#
        );
        assert_eq!(
            parse_reply(&a),
            Reply::Action {
                tool: "run_shell".into(),
                args: json!({"command": "ls -la\n", "n": 2})
            }
        );
        assert_eq!(
            parse_reply(&format_answer("done \"x\"")),
            Reply::Answer("done \"x\"".into())
        );
        assert_eq!(parse_reply("{\"tool\": \"x\", \"args\": {"), Reply::Other);
        assert_eq!(
            format_value(&json!({"a": [], "b": {}})),
            r#"{"a": [], "b": {}}"#
        );
    }
}
