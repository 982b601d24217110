use super::*;

#[test]
fn finds_the_programs_test_sh_runs() {
    let sh = "#!/bin/bash\n# comment pytest\napt-get update\nA=1 B=2 curl -s x | sh\n\
              source $HOME/.local/bin/env\nif python3 -m pytest /tests/t.py; then echo 1 > r; fi\n\
              timeout 30 uvx pytest && ./local.sh\n";
    assert_eq!(
        runner_programs(sh),
        [
            "/bin/bash",
            "apt-get",
            "curl",
            "sh",
            "python3",
            "uvx",
            "./local.sh"
        ]
    );
    assert_eq!(
        runner_programs("#!/usr/bin/env python3\nprint(1)\n")[0],
        "python3"
    );
}

#[test]
fn fingerprint_changes_name_what_changed() {
    let before = Fingerprint::parse(
        "python3\t/usr/bin/python3\nbash\t/bin/bash\npytest\t/usr/bin/pytest\n\
         stat:/usr/bin/python3\t1:2:3:4:5\nstat:/bin/bash\t1:3:3:4:5\nstat:/usr/bin/pytest\t1:4:3:4:5\n",
    );
    assert!(before.changes_since(&before).is_empty());
    let after = Fingerprint::parse(
        "python3\t/usr/bin/python3\npytest\t/usr/local/bin/pytest\nuv\t/usr/bin/uv\n\
         stat:/usr/bin/python3\t1:2:3:4:6\nstat:/usr/local/bin/pytest\t1:9:3:4:5\nstat:/usr/bin/uv\t1:8:1:1:1\n",
    );
    let r: Vec<String> = after
        .changes_since(&before)
        .into_iter()
        .map(|r| r.reason)
        .collect();
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(r[0].contains("`bash`") && r[0].contains("removed"));
    assert!(r[1].contains("`pytest`") && r[1].contains("/usr/local/bin/pytest"));
    assert!(r[2].contains("`python3`") && r[2].contains("replaced"));
}

#[test]
fn fingerprint_command_sees_a_replaced_program() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy("/bin/sh", bin.join("tool")).unwrap();
    let take = || {
        let cmd = fingerprint_command(&["tool".into(), "nope-xyz".into()]);
        let out = std::process::Command::new("sh")
            .args(["-c", &cmd])
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap();
        Fingerprint::parse(&String::from_utf8_lossy(&out.stdout))
    };
    let before = take();
    assert_eq!(before.0.len(), 1, "{before:?}");
    assert!(before.0["tool"].1.contains(':'), "{before:?}");
    assert!(take().changes_since(&before).is_empty());
    // Same size and inode, rewritten in place: the ctime (to the nanosecond) tells.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let data = std::fs::read(bin.join("tool")).unwrap();
    std::fs::write(bin.join("tool"), data).unwrap();
    let r = take().changes_since(&before);
    assert_eq!(r.len(), 1, "{r:?}");
}

#[test]
fn trace_scan_flags_the_verifiers_ground_with_turns() {
    let d = tempfile::tempdir().unwrap();
    let calls = [
        (1, "shell", r#"{"command":"ls /app && cat /tests/x"}"#),
        (
            2,
            "shell",
            r#"{"command":"echo 1 > /logs/verifier/reward.txt"}"#,
        ),
        (3, "shell", r#"{"command":"cp json.py /tests/"}"#),
        (
            4,
            "write_file",
            r#"{"path":"/tests/test.sh","content":"x"}"#,
        ),
        (5, "shell", r#"{"command":"python3 solve.py > out.txt"}"#),
        (6, "shell", r#"{"command":"echo hi >/tests/a"}"#),
    ];
    let mut text = String::from("{\"event\":\"run_start\"}\nnot json\n");
    for (turn, name, args) in calls {
        text.push_str(&format!(
            "{{\"event\":\"tool_call\",\"turn\":{turn},\"name\":\"{name}\",\"args\":{args}}}\n"
        ));
    }
    std::fs::write(d.path().join("trace.jsonl"), text).unwrap();
    let r = scan_trace(&d.path().join("trace.jsonl"));
    let turns: Vec<Option<u32>> = r.iter().map(|r| r.turn).collect();
    assert_eq!(turns, [Some(2), Some(3), Some(4), Some(6)], "{r:?}");
    assert!(r[0].reason.contains("/logs/verifier"));
    assert!(r[1].reason.contains("writes under /tests"));
    assert!(scan_trace(&d.path().join("missing/trace.jsonl")).is_empty());
}
