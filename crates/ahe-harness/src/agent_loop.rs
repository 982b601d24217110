//! The one agent loop body. The code agent and its sub-agents (in a sandbox, with a
//! harness's tools and middleware) and the debugger and evolve agents (on the host, with
//! jailed tools) all turn here: the same [`Session`] limits and trace, the same request,
//! one compaction when the context overflows, the same way calls run and observations go
//! back, and one way to stop (a [`Stop`]). What differs by role is an [`Agent`]'s hooks.

use std::convert::Infallible;

use ahe_model::{
    ChatRequest, ChatResponse, ModelClient, ModelError, Role, ToolCall, ToolChoice, ToolProtocol,
    ToolSpec,
};

use crate::middleware::{compact, conversation_chars};
use crate::session::{CallError, End, RunOutcome, Session, Stop};
use crate::wire::Wire;

/// The fixed parts of every request of one conversation.
#[derive(Debug, Clone)]
pub struct Request {
    /// The role the model client bills and routes the calls under.
    pub role: Role,
    /// The tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// How tool calls and observations travel (native or JSON-in-text).
    pub protocol: ToolProtocol,
}

/// What the model's answer amounts to, once the agent has read it.
#[derive(Debug)]
pub enum Reply {
    /// Tool calls to run, in order; their observations go back together.
    Calls(Vec<ToolCall>),
    /// An answer without a tool call (its text).
    Answer(String),
    /// Nothing to run: the agent has already answered the model (a blocked or malformed turn).
    Handled,
}

/// What one kind of agent brings to the loop: the role's differences as hooks.
#[async_trait::async_trait]
pub trait Agent: Send {
    /// Before the model call of `turn`: may rewrite the conversation; `ToolChoice::None`
    /// makes this turn a text answer.
    async fn before_model(&mut self, s: &mut Session<'_>, turn: u32) -> ToolChoice;
    /// Reads the model's answer and adds it to the conversation.
    async fn after_model(&mut self, s: &mut Session<'_>, resp: ChatResponse) -> Reply;
    /// The model answered without a tool call: a message that sends it back to work, or
    /// the stop.
    async fn answer(&mut self, s: &mut Session<'_>, text: String) -> Result<String, Stop>;
    /// Runs one tool call: its observation, or the stop (a finish accepted, a tool that
    /// ends the run).
    async fn tool(&mut self, s: &mut Session<'_>, call: &ToolCall) -> Result<String, Stop>;
}

/// Runs a conversation from its first turn to its stop, and ends the session.
pub async fn run(
    mut s: Session<'_>,
    model: &ModelClient,
    req: &Request,
    agent: &mut dyn Agent,
) -> RunOutcome {
    let stop = match turns(&mut s, model, req, agent).await {
        Err(stop) => stop,
        Ok(never) => match never {},
    };
    s.end(stop)
}

/// The turns of one conversation; leaves only by `?` with the [`Stop`].
async fn turns(
    s: &mut Session<'_>,
    model: &ModelClient,
    req: &Request,
    agent: &mut dyn Agent,
) -> Result<Infallible, Stop> {
    let wire = Wire(req.protocol);
    loop {
        let turn = s.next_turn()?;
        let choice = agent.before_model(s, turn).await;
        let resp = call_model(s, model, req, choice).await?;
        let calls = match agent.after_model(s, resp).await {
            Reply::Handled => continue,
            Reply::Answer(text) => {
                let back = agent.answer(s, text).await?;
                s.messages.push(ahe_model::Message::user(back));
                continue;
            }
            Reply::Calls(calls) => calls,
        };
        let mut obs = wire.observations();
        for call in &calls {
            let o = agent.tool(s, call).await?;
            obs.push(call, &o);
        }
        obs.send(&mut s.messages);
    }
}

/// One model call within the deadline; on a context overflow compacts the conversation to
/// half its size once and retries.
async fn call_model(
    s: &mut Session<'_>,
    model: &ModelClient,
    req: &Request,
    tool_choice: ToolChoice,
) -> Result<ChatResponse, Stop> {
    let mut compacted = false;
    loop {
        let r = ChatRequest {
            role: req.role,
            messages: s.messages.clone(),
            tools: req.tools.clone(),
            protocol: req.protocol,
            temperature: None,
            max_tokens: None,
            tool_choice,
        };
        match s.call(model, &r).await {
            Err(CallError::Model(ModelError::ContextLength(_))) if !compacted => {
                compacted = true;
                let half = conversation_chars(&s.messages) / 2;
                match compact(&s.messages, half, 4) {
                    Some(m) => s.messages = m,
                    None => return Err(Stop::at(End::ContextExceeded)),
                }
            }
            r => return r.map_err(Stop::from),
        }
    }
}
