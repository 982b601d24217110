//! The tool protocol behind one interface: how a model's answer carries tool calls and how
//! their observations go back — native tool calling (`tools` in the request, `tool`
//! messages back) or JSON-in-text (one `{"tool": …, "args": …}` object in the answer, the
//! observations in one user message).

use ahe_model::{ChatResponse, Message, ToolCall, ToolProtocol};
use serde::Deserialize;
use serde_json::Value;

use crate::prompt;

/// One conversation's tool protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wire(pub ToolProtocol);

/// Observations of one turn's calls, waiting to be sent back.
pub struct Observations {
    wire: Wire,
    native: Vec<Message>,
    text: Vec<String>,
}

#[derive(Deserialize)]
struct JsonAction {
    tool: String,
    #[serde(default, alias = "arguments")]
    args: Option<Value>,
}

impl Wire {
    /// The tool calls of an answer; for JSON-in-text also a format error when the text
    /// tries to act (mentions `"tool"`) but holds no readable action.
    pub fn parse(self, resp: &ChatResponse) -> (Vec<ToolCall>, Option<String>) {
        if self.0 == ToolProtocol::Native {
            return (resp.tool_calls.clone(), None);
        }
        let text = resp.content.as_deref().unwrap_or("");
        for (i, _) in text.match_indices('{') {
            let mut it = serde_json::Deserializer::from_str(&text[i..]).into_iter::<Value>();
            if let Some(Ok(v)) = it.next() {
                if let Ok(a) = serde_json::from_value::<JsonAction>(v) {
                    let args = a.args.unwrap_or(Value::Object(Default::default()));
                    let call = ToolCall {
                        id: "json_0".into(),
                        name: a.tool,
                        arguments: args,
                    };
                    return (vec![call], None);
                }
            }
        }
        if text.contains("\"tool\"") {
            let e = "no complete JSON object with a \"tool\" field was found";
            return (vec![], Some(e.into()));
        }
        (vec![], None)
    }

    /// The answer as it goes into the conversation (its calls are text in JSON-in-text).
    pub fn assistant(self, resp: &ChatResponse) -> Message {
        match self.0 {
            ToolProtocol::Native => resp.to_message(),
            ToolProtocol::JsonInText => Message::Assistant {
                content: resp.content.clone(),
                tool_calls: vec![],
                opaque: resp.opaque.clone(),
            },
        }
    }

    /// An empty set of observations for this turn.
    pub fn observations(self) -> Observations {
        Observations {
            wire: self,
            native: Vec::new(),
            text: Vec::new(),
        }
    }
}

impl Observations {
    /// Adds the observation of one call.
    pub fn push(&mut self, call: &ToolCall, observation: &str) {
        match self.wire.0 {
            ToolProtocol::Native => self.native.push(Message::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content: observation.to_string(),
            }),
            ToolProtocol::JsonInText => self
                .text
                .push(prompt::json_observation(&call.name, observation)),
        }
    }

    /// Sends them: appends the turn's observation messages to the conversation.
    pub fn send(self, messages: &mut Vec<Message>) {
        messages.extend(self.native);
        if !self.text.is_empty() {
            messages.push(Message::user(self.text.join("\n\n")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(text: &str) -> ChatResponse {
        ChatResponse {
            content: Some(text.into()),
            tool_calls: vec![],
            usage: Default::default(),
            finish_reason: None,
            cost_usd: 0.0,
            opaque: vec![],
        }
    }

    #[test]
    fn json_in_text_parsing() {
        let w = Wire(ToolProtocol::JsonInText);
        let (c, e) = w.parse(&resp(
            "I will list.\n{\"tool\": \"sh\", \"args\": {\"command\": \"ls\"}}",
        ));
        assert!(e.is_none());
        assert_eq!(c[0].name, "sh");
        assert_eq!(c[0].arguments["command"], "ls");
        let (c, e) = w.parse(&resp("All done, the file {x} exists."));
        assert!(c.is_empty() && e.is_none());
        let (c, e) = w.parse(&resp("{\"tool\": \"sh\", \"args\": {\"command\""));
        assert!(c.is_empty() && e.is_some());
    }

    #[test]
    fn observations_go_back_per_protocol() {
        let call = ToolCall {
            id: "c1".into(),
            name: "sh".into(),
            arguments: Value::Null,
        };
        let mut m = Vec::new();
        let mut o = Wire(ToolProtocol::Native).observations();
        o.push(&call, "out");
        o.send(&mut m);
        assert!(matches!(&m[0], Message::Tool { tool_call_id, .. } if tool_call_id == "c1"));
        let mut m = Vec::new();
        let mut o = Wire(ToolProtocol::JsonInText).observations();
        o.push(&call, "out1");
        o.push(&call, "out2");
        o.send(&mut m);
        assert_eq!(m.len(), 1);
        assert!(
            matches!(&m[0], Message::User { content } if content.contains("out1") && content.contains("out2"))
        );
    }
}
