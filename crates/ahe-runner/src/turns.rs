//! A cleaned trace as compact text: its turns (assistant text, tool calls and results,
//! middleware decisions, runtime feedback) with long texts clipped, as the trajectory judge
//! reads a whole trial and the debugger's `read_trace` tool a range of turns.

use ahe_rundir::clean::CleanTrace;
use minijinja::context;

const TURNS: &str = include_str!("../templates/turns.txt");

/// `s` on one line (newlines shown as ` ⏎ `), cut to `n` characters with `…` when longer.
pub fn clip(s: &str, n: usize) -> String {
    let one = s.replace('\n', " ⏎ ");
    if one.chars().count() <= n {
        one
    } else {
        format!("{}…", one.chars().take(n).collect::<String>())
    }
}

/// Renders a cleaned trace's turns `from..=to` as compact text for the debugger and the
/// trajectory judge (`templates/turns.txt`; long texts clipped).
pub fn render_turns(t: &CleanTrace, from: u32, to: u32) -> String {
    let turns: Vec<minijinja::Value> = (t.turns.iter())
        .filter(|x| x.turn >= from && x.turn <= to)
        .map(|x| {
            let calls: Vec<minijinja::Value> = (x.tool_calls.iter())
                .map(|c| {
                    context! {
                        name => c.name, args => clip(&c.args.to_string(), 2000), ok => c.ok.to_string(),
                        exit => c.exit_code.map(|e| e.to_string()).unwrap_or("-".into()),
                        output => clip(c.output.as_deref().unwrap_or(""), 3000),
                    }
                })
                .collect();
            let middleware: Vec<minijinja::Value> = (x.middleware.iter())
                .map(|m| context! { name => m.name, hook => m.hook, decision => clip(&m.decision.to_string(), 300) })
                .collect();
            let content = x.content.as_deref().filter(|c| !c.trim().is_empty());
            context! {
                turn => x.turn, agent => x.agent, content => content.map(|c| clip(c, 2000)),
                calls, middleware,
                feedback => x.feedback.iter().map(|f| clip(f, 1000)).collect::<Vec<_>>(),
            }
        })
        .collect();
    ahe_harness::text::render(TURNS, context! { turns })
}
