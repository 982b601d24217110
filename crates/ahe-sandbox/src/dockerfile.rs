//! A parser for the subset of Dockerfile instructions the local backend replays.
//!
//! Supported: comments, line continuations, `FROM` (recorded), `WORKDIR`, `ENV` (both
//! forms), `ARG`, `COPY`/`ADD` of local context paths, `RUN` (shell form, JSON exec form and
//! heredocs), `SHELL`, and the metadata instructions (`USER`, `EXPOSE`, `CMD`, ...) which are
//! recorded and ignored. `$VAR`/`${VAR}` (plus `${VAR:-x}`/`${VAR:+x}`) are substituted in
//! `WORKDIR`, `ENV`, `ARG` and `COPY` arguments from earlier `ARG`/`ENV` values.

mod lex;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lex::{parse_json_array, split_flags, split_logical, split_words, unquote, Logical};

/// `PATH` of a typical Debian/Ubuntu image; seeds `$PATH` substitution.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A Dockerfile error, naming the file, the line and the instruction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}:{line}: {instruction}: {message}", path.display())]
pub struct DockerfileError {
    /// The Dockerfile.
    pub path: PathBuf,
    /// 1-based line number where the instruction starts.
    pub line: usize,
    /// The instruction keyword (upper case), or `-` when none applies.
    pub instruction: String,
    /// What is wrong.
    pub message: String,
}

/// How a `RUN` step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunCommand {
    /// Shell form: run through the current `SHELL` (default `/bin/sh -c`).
    Shell(String),
    /// JSON exec form: run this argv directly.
    Exec(Vec<String>),
}

/// One parsed instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    /// `FROM image` (recorded, ignored by the local backend).
    From(String),
    /// `WORKDIR`, resolved to an absolute, normalised path.
    Workdir(String),
    /// `ENV` pairs, values substituted and unquoted.
    Env(Vec<(String, String)>),
    /// `ARG name[=default]` (default substituted).
    Arg {
        /// Argument name.
        name: String,
        /// Default value, if any.
        default: Option<String>,
    },
    /// `COPY`/`ADD` from the build context.
    Copy {
        /// Source paths relative to the context (may contain `*`/`?` wildcards).
        sources: Vec<String>,
        /// Absolute, normalised destination.
        dest: String,
        /// Whether the destination is explicitly a directory (trailing `/`, or several sources).
        dest_is_dir: bool,
        /// Whether the instruction was `ADD`.
        add: bool,
    },
    /// `RUN`.
    Run(RunCommand),
    /// `SHELL ["exe", "args"...]`.
    Shell(Vec<String>),
    /// Instructions recorded but ignored (`USER`, `EXPOSE`, `CMD`, `LABEL`...).
    Ignored {
        /// The keyword, upper case.
        keyword: String,
        /// The raw arguments.
        args: String,
    },
}

/// One instruction with its 1-based starting line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Line where the instruction starts.
    pub line: usize,
    /// The instruction.
    pub instruction: Instruction,
}

/// A parsed Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    /// Where it was read from (for messages).
    pub path: PathBuf,
    /// The instructions, in order.
    pub steps: Vec<Step>,
    /// The final `WORKDIR`, if any.
    pub workdir: Option<String>,
    /// The final `ENV` (only variables set by `ENV`).
    pub env: BTreeMap<String, String>,
}

impl Dockerfile {
    /// Reads and parses a Dockerfile.
    pub fn from_file(path: &Path) -> Result<Dockerfile, DockerfileError> {
        let text = std::fs::read_to_string(path).map_err(|e| DockerfileError {
            path: path.to_path_buf(),
            line: 0,
            instruction: "-".into(),
            message: format!("cannot read: {e}"),
        })?;
        Dockerfile::parse(&text, path)
    }

    /// Parses Dockerfile text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Dockerfile, DockerfileError> {
        Parser::new(path).parse(text)
    }
}

struct Parser {
    path: PathBuf,
    steps: Vec<Step>,
    workdir: Option<String>,
    env: BTreeMap<String, String>,
    args: BTreeMap<String, String>,
    froms: usize,
}

/// The command of a `RUN`'s arguments: a JSON array is an exec form, `<<EOF` a heredoc
/// script, anything else a shell command.
fn run_command(args: &str) -> RunCommand {
    // Flags (`--mount=...`, `--network=...`) are ignored.
    let (_flags, rest) = split_flags(args);
    match parse_json_array(rest) {
        Some(argv) => RunCommand::Exec(argv),
        None => match rest.strip_prefix("<<") {
            // `RUN <<EOF` runs the heredoc body as the script.
            Some(_) => {
                let body: Vec<&str> = rest.lines().skip(1).collect();
                let body = &body[..body.len().saturating_sub(1)];
                RunCommand::Shell(body.join("\n"))
            }
            None => RunCommand::Shell(rest.to_string()),
        },
    }
}

impl Parser {
    fn new(path: &Path) -> Parser {
        Parser {
            path: path.to_path_buf(),
            steps: Vec::new(),
            workdir: None,
            env: BTreeMap::new(),
            args: BTreeMap::new(),
            froms: 0,
        }
    }

    fn err(&self, line: usize, instruction: &str, message: impl Into<String>) -> DockerfileError {
        DockerfileError {
            path: self.path.clone(),
            line,
            instruction: instruction.to_string(),
            message: message.into(),
        }
    }

    fn parse(mut self, text: &str) -> Result<Dockerfile, DockerfileError> {
        for logical in split_logical(text).map_err(|(line, msg)| self.err(line, "-", msg))? {
            for instruction in self.instruction(&logical)? {
                self.steps.push(Step {
                    line: logical.line,
                    instruction,
                });
            }
        }
        Ok(Dockerfile {
            path: self.path,
            steps: self.steps,
            workdir: self.workdir,
            env: self.env,
        })
    }

    /// Looks a variable up: `ENV` values win over `ARG` values; `PATH` has a default.
    fn lookup(&self, name: &str) -> Option<String> {
        self.env
            .get(name)
            .or_else(|| self.args.get(name))
            .cloned()
            .or_else(|| (name == "PATH").then(|| DEFAULT_PATH.to_string()))
    }

    fn subst(&self, s: &str, line: usize, kw: &str) -> Result<String, DockerfileError> {
        substitute(s, &|n| self.lookup(n)).map_err(|m| self.err(line, kw, m))
    }

    fn instruction(&mut self, l: &Logical) -> Result<Vec<Instruction>, DockerfileError> {
        let (line, kw, args) = (l.line, l.keyword.as_str(), l.args.trim());
        let need_args = |s: &Parser| {
            if args.is_empty() {
                Err(s.err(line, kw, "missing arguments"))
            } else {
                Ok(())
            }
        };
        Ok(vec![match kw {
            "FROM" => {
                need_args(self)?;
                self.froms += 1;
                if self.froms > 1 {
                    return Err(self.err(line, kw, "multi-stage builds are not supported"));
                }
                Instruction::From(args.to_string())
            }
            "WORKDIR" => {
                need_args(self)?;
                let raw = unquote(&self.subst(args, line, kw)?);
                let base = self.workdir.clone().unwrap_or_else(|| "/".into());
                let dir = resolve(&base, &raw);
                self.workdir = Some(dir.clone());
                Instruction::Workdir(dir)
            }
            "ENV" => {
                need_args(self)?;
                let pairs = self.env_pairs(args, line, kw)?;
                for (k, v) in &pairs {
                    self.env.insert(k.clone(), v.clone());
                }
                Instruction::Env(pairs)
            }
            "ARG" => {
                need_args(self)?;
                return self.arg(args, line, kw);
            }
            "COPY" | "ADD" => self.copy(args, line, kw)?,
            "RUN" => {
                need_args(self)?;
                Instruction::Run(run_command(args))
            }
            "SHELL" => match parse_json_array(args) {
                Some(argv) if !argv.is_empty() => Instruction::Shell(argv),
                _ => return Err(self.err(line, kw, "expects a JSON array")),
            },
            "USER" | "EXPOSE" | "CMD" | "ENTRYPOINT" | "LABEL" | "VOLUME" | "HEALTHCHECK"
            | "STOPSIGNAL" | "ONBUILD" | "MAINTAINER" => Instruction::Ignored {
                keyword: kw.to_string(),
                args: args.to_string(),
            },
            _ => return Err(self.err(line, kw, "unknown instruction")),
        }])
    }

    /// `ARG a b=default ...`: one instruction per name, each name's default (substituted,
    /// or empty) added to the variables.
    fn arg(
        &mut self,
        args: &str,
        line: usize,
        kw: &str,
    ) -> Result<Vec<Instruction>, DockerfileError> {
        let words = split_words(args).map_err(|m| self.err(line, kw, m))?;
        let mut out = Vec::new();
        for w in words {
            let (name, default) = match w.split_once('=') {
                Some((k, v)) => (unquote(k), Some(unquote(&self.subst(v, line, kw)?))),
                None => (unquote(&w), None),
            };
            if name.is_empty() {
                return Err(self.err(line, kw, format!("empty name in {w:?}")));
            }
            self.args
                .insert(name.clone(), default.clone().unwrap_or_default());
            out.push(Instruction::Arg { name, default });
        }
        Ok(out)
    }

    /// Parses `K=V K2="v 2"` (or legacy `K V...`), substituting values.
    fn env_pairs(
        &self,
        args: &str,
        line: usize,
        kw: &str,
    ) -> Result<Vec<(String, String)>, DockerfileError> {
        let first = args.split_whitespace().next().unwrap_or("");
        if !first.contains('=') {
            let value = args[first.len()..].trim();
            let value = unquote(&self.subst(value, line, kw)?);
            return Ok(vec![(first.to_string(), value)]);
        }
        let words = split_words(args).map_err(|m| self.err(line, kw, m))?;
        let mut out = Vec::new();
        for w in words {
            let (k, v) = match w.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => return Err(self.err(line, kw, format!("expected KEY=VALUE, got {w:?}"))),
            };
            if k.is_empty() {
                return Err(self.err(line, kw, format!("empty name in {w:?}")));
            }
            out.push((unquote(&k), unquote(&self.subst(&v, line, kw)?)));
        }
        Ok(out)
    }

    fn copy(&self, args: &str, line: usize, kw: &str) -> Result<Instruction, DockerfileError> {
        let (flags, rest) = split_flags(args);
        if let Some(f) = flags.iter().find(|f| f.starts_with("--from")) {
            return Err(self.err(
                line,
                kw,
                format!("{f} (copy from another image/stage) is not supported"),
            ));
        }
        let words = match parse_json_array(rest) {
            Some(w) => w,
            None => split_words(rest).map_err(|m| self.err(line, kw, m))?,
        };
        if words.len() < 2 {
            return Err(self.err(line, kw, "needs at least one source and a destination"));
        }
        if words.iter().any(|w| w.starts_with("<<")) {
            return Err(self.err(line, kw, "heredoc sources are not supported"));
        }
        let json = parse_json_array(rest).is_some();
        let mut words = words
            .iter()
            .map(|w| {
                let v = self.subst(w, line, kw)?;
                Ok(if json { v } else { unquote(&v) })
            })
            .collect::<Result<Vec<_>, DockerfileError>>()?;
        let raw_dest = words.pop().unwrap_or_default();
        for s in &words {
            if s.contains("://") {
                return Err(self.err(line, kw, format!("remote source {s} is not supported")));
            }
        }
        let base = self.workdir.clone().unwrap_or_else(|| "/".into());
        let dest_is_dir = raw_dest.ends_with('/')
            || raw_dest == "."
            || raw_dest.ends_with("/.")
            || words.len() > 1
            || words.iter().any(|w| w.contains(['*', '?', '[']));
        Ok(Instruction::Copy {
            sources: words,
            dest: resolve(&base, &raw_dest),
            dest_is_dir,
            add: kw == "ADD",
        })
    }
}

/// Substitutes `$VAR`, `${VAR}`, `${VAR:-default}` and `${VAR:+alt}`; `\$` stays literal.
/// Text inside single quotes is left alone; unknown variables become empty.
pub fn substitute(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let (mut in_single, mut in_double) = (false, false);
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' && !in_double {
            in_single = !in_single;
        } else if c == '"' && !in_single {
            in_double = !in_double;
        }
        if c == '\\' && i + 1 < chars.len() && chars[i + 1] == '$' {
            out.push_str("\\$");
            i += 2;
            continue;
        }
        if c != '$' || in_single || i + 1 >= chars.len() {
            out.push(c);
            i += 1;
            continue;
        }
        if chars[i + 1] == '{' {
            let Some(close) = chars[i..].iter().position(|&c| c == '}') else {
                return Err(format!("unterminated ${{ in {s:?}"));
            };
            let inner: String = chars[i + 2..i + close].iter().collect();
            let (name, op) = match inner.find(":-").or_else(|| inner.find(":+")) {
                Some(p) => (&inner[..p], Some((&inner[p..p + 2], &inner[p + 2..]))),
                None => (inner.as_str(), None),
            };
            let value = lookup(name).filter(|v| !v.is_empty());
            match op {
                None => out.push_str(&value.unwrap_or_default()),
                Some((":-", word)) => out.push_str(&value.unwrap_or_else(|| word.to_string())),
                Some((_, word)) => {
                    if value.is_some() {
                        out.push_str(word);
                    }
                }
            }
            i += close + 1;
        } else {
            let name: String = chars[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .collect();
            if name.is_empty() {
                out.push('$');
                i += 1;
                continue;
            }
            out.push_str(&lookup(&name).unwrap_or_default());
            i += 1 + name.len();
        }
    }
    Ok(out)
}

/// Resolves `path` against the absolute `base` and normalises `.`/`..`/`//` lexically.
pub fn resolve(base: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{base}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for comp in joined.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
#[path = "dockerfile_tests.rs"]
mod tests;
