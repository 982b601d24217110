//! Unit tests of the Dockerfile parser.

use super::*;

fn parse(text: &str) -> Dockerfile {
    Dockerfile::parse(text, Path::new("test/Dockerfile")).expect("parses")
}

fn parse_err(text: &str) -> DockerfileError {
    Dockerfile::parse(text, Path::new("test/Dockerfile")).expect_err("should fail")
}

fn instructions(d: &Dockerfile) -> Vec<&Instruction> {
    d.steps.iter().map(|s| &s.instruction).collect()
}

/// The shared TB2 sample dir, or `None` (with a note) when it is absent.
fn sample_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tb2-sample");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("note: {} is absent; skipping sample tests", dir.display());
        None
    }
}

#[test]
fn workdir_env_copy_run_basics() {
    let d = parse(
        "# comment\nFROM python:3.13\nWORKDIR /app\nENV A=1 B=\"two words\"\nWORKDIR sub\n\
         COPY --chown=1:1 --chmod=755 a.txt b/ ./\nRUN echo hi\n",
    );
    assert_eq!(d.workdir.as_deref(), Some("/app/sub"));
    assert_eq!(d.env.get("A").map(String::as_str), Some("1"));
    assert_eq!(d.env.get("B").map(String::as_str), Some("two words"));
    let ins = instructions(&d);
    assert_eq!(ins[0], &Instruction::From("python:3.13".into()));
    assert_eq!(
        ins[4],
        &Instruction::Copy {
            sources: vec!["a.txt".into(), "b/".into()],
            dest: "/app/sub".into(),
            dest_is_dir: true,
            add: false,
        }
    );
    assert_eq!(
        ins[5],
        &Instruction::Run(RunCommand::Shell("echo hi".into()))
    );
    let lines: Vec<usize> = d.steps.iter().map(|s| s.line).collect();
    assert_eq!(lines, vec![2, 3, 4, 5, 6, 7]);
}

#[test]
fn legacy_env_and_arg_substitution() {
    let d = parse(
        "ARG VERSION=1.2\nARG BASE\nENV HOME_DIR /opt/tool-$VERSION\nENV P=${HOME_DIR}/bin:$PATH\n\
         WORKDIR ${HOME_DIR}/src\nENV Q=${UNSET:-fallback} R=${VERSION:+set} S='$VERSION'\n\
         COPY x-${VERSION}.tar /dst/\n",
    );
    assert_eq!(d.env["HOME_DIR"], "/opt/tool-1.2");
    assert_eq!(d.env["P"], format!("/opt/tool-1.2/bin:{DEFAULT_PATH}"));
    assert_eq!(d.workdir.as_deref(), Some("/opt/tool-1.2/src"));
    assert_eq!(d.env["Q"], "fallback");
    assert_eq!(d.env["R"], "set");
    assert_eq!(d.env["S"], "$VERSION");
    let ins = instructions(&d);
    assert_eq!(
        ins[1],
        &Instruction::Arg {
            name: "BASE".into(),
            default: None
        }
    );
    match ins[6] {
        Instruction::Copy { sources, dest, .. } => {
            assert_eq!(sources, &vec!["x-1.2.tar".to_string()]);
            assert_eq!(dest, "/dst");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn continuations_skip_comments_and_keep_line_numbers() {
    let d = parse(
        "FROM x\n\nRUN apt-get update \\\n    # a comment inside\n && apt-get install -y \\\n\n      git\n\
         run echo lower\n",
    );
    let ins = instructions(&d);
    assert_eq!(
        ins[1],
        &Instruction::Run(RunCommand::Shell(
            "apt-get update  && apt-get install -y       git".into()
        ))
    );
    assert_eq!(d.steps[1].line, 3);
    assert_eq!(d.steps[2].line, 8);
}

#[test]
fn exec_form_shell_and_heredoc() {
    let d = parse(
        "SHELL [\"/bin/bash\", \"-c\"]\nRUN [\"python3\", \"-c\", \"print(1)\"]\n\
         RUN <<EOF\necho one\n# not a comment\necho two\nEOF\nRUN cat > /f <<'END'\nbody\nEND\nCMD [\"x\"]\n",
    );
    let ins = instructions(&d);
    assert_eq!(
        ins[0],
        &Instruction::Shell(vec!["/bin/bash".into(), "-c".into()])
    );
    assert_eq!(
        ins[1],
        &Instruction::Run(RunCommand::Exec(vec![
            "python3".into(),
            "-c".into(),
            "print(1)".into()
        ]))
    );
    assert_eq!(
        ins[2],
        &Instruction::Run(RunCommand::Shell(
            "echo one\n# not a comment\necho two".into()
        ))
    );
    assert_eq!(
        ins[3],
        &Instruction::Run(RunCommand::Shell("cat > /f <<'END'\nbody\nEND".into()))
    );
    assert_eq!(d.steps[3].line, 8);
    assert!(matches!(ins[4], Instruction::Ignored { keyword, .. } if keyword == "CMD"));
}

#[test]
fn relative_copy_dest_and_dotdot_normalised() {
    let d = parse("COPY a b\nWORKDIR /app/x\nCOPY a ../y\nCOPY a .\nADD [\"s p\", \"/d e/\"]\n");
    let dests: Vec<(String, bool, bool)> = d
        .steps
        .iter()
        .filter_map(|s| match &s.instruction {
            Instruction::Copy {
                dest,
                dest_is_dir,
                add,
                ..
            } => Some((dest.clone(), *dest_is_dir, *add)),
            _ => None,
        })
        .collect();
    assert_eq!(
        dests,
        vec![
            ("/b".to_string(), false, false),
            ("/app/y".to_string(), false, false),
            ("/app/x".to_string(), true, false),
            ("/d e".to_string(), true, true),
        ]
    );
}

#[test]
fn errors_name_path_line_and_instruction() {
    let e = parse_err("FROM x\nWORKDIR /app\nCOPY --from=builder /a /b\n");
    assert_eq!((e.line, e.instruction.as_str()), (3, "COPY"));
    let msg = e.to_string();
    assert!(msg.starts_with("test/Dockerfile:3: COPY:"), "{msg}");
    assert!(msg.contains("--from=builder"), "{msg}");

    let e = parse_err("FROM x\n\nFROBNICATE now\n");
    assert_eq!((e.line, e.instruction.as_str()), (3, "FROBNICATE"));
    let e = parse_err("COPY onlyone\n");
    assert_eq!(e.instruction, "COPY");
    let e = parse_err("ADD https://example.com/x /x\n");
    assert!(e.message.contains("remote"), "{}", e.message);
    let e = parse_err("FROM a AS b\nFROM c\n");
    assert!(e.message.contains("multi-stage"), "{}", e.message);
    let e = parse_err("RUN <<EOF\necho\n");
    assert!(e.message.contains("heredoc"), "{}", e.message);
    let e = parse_err("ENV A=\"unterminated\n");
    assert_eq!(e.instruction, "ENV");
}

#[test]
fn resolve_normalises() {
    assert_eq!(resolve("/", "app"), "/app");
    assert_eq!(resolve("/app", "../x/./y//z"), "/x/y/z");
    assert_eq!(resolve("/app", "/abs/"), "/abs");
    assert_eq!(resolve("/", "../.."), "/");
}

#[test]
fn shift_operators_are_not_heredocs() {
    let d = parse("RUN echo $((1<<3))\nRUN echo done\n");
    assert_eq!(d.steps.len(), 2);
}

#[test]
fn parses_every_tb2_sample_dockerfile() {
    let Some(dir) = sample_dir() else { return };
    let mut parsed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path().join("environment/Dockerfile");
        if !path.is_file() {
            continue;
        }
        let d = Dockerfile::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(
                d.steps.first().map(|s| &s.instruction),
                Some(Instruction::From(_))
            ),
            "{}: first step is FROM",
            path.display()
        );
        parsed += 1;
    }
    assert!(parsed >= 8, "only {parsed} sample Dockerfiles found");
}

#[test]
fn tb2_fix_git_and_prove_plus_comm() {
    let Some(dir) = sample_dir() else { return };
    let d = Dockerfile::from_file(&dir.join("fix-git/environment/Dockerfile")).unwrap();
    assert_eq!(d.workdir.as_deref(), Some("/app/personal-site"));
    let kinds: Vec<&str> = d
        .steps
        .iter()
        .map(|s| match &s.instruction {
            Instruction::From(_) => "FROM",
            Instruction::Workdir(_) => "WORKDIR",
            Instruction::Copy { .. } => "COPY",
            Instruction::Run(_) => "RUN",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        vec!["FROM", "WORKDIR", "RUN", "COPY", "COPY", "RUN", "WORKDIR"]
    );
    let copy = d
        .steps
        .iter()
        .find_map(|s| match &s.instruction {
            Instruction::Copy { sources, dest, .. } => Some((sources.clone(), dest.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(copy, (vec!["setup.sh".to_string()], "/app".to_string()));

    let d = Dockerfile::from_file(&dir.join("prove-plus-comm/environment/Dockerfile")).unwrap();
    assert_eq!(d.workdir.as_deref(), Some("/workspace"));
    assert!(d.steps.iter().any(|s| matches!(&s.instruction,
        Instruction::Copy { dest, dest_is_dir: false, .. } if dest == "/workspace/plus_comm.v")));
}
