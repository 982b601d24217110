//! Unit tests of `config.rs`.
use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn extends_and_env_substitution() {
    let d = tempfile::tempdir().unwrap();
    write(
            d.path(),
            "base.toml",
            "k = 2\n[benchmark]\npath = \"benchmarks/smoke\"\n[sandbox]\nbackend = \"local\"\n[models.default]\nprovider = \"openai\"\nmodel = \"m1\"\nprice_input_per_mtok = 3.0\n",
        );
    std::env::set_var("AHE_TEST_CFG_URL", "http://127.0.0.1:9/v1");
    let p = write(
            d.path(),
            "child.toml",
            "extends = \"base.toml\"\nk = 3\n[models.default]\nbase_url = \"${AHE_TEST_CFG_URL}\"\n[models.evolve]\nmodel = \"${AHE_TEST_CFG_UNSET:-m2}\"\n",
        );
    let c = RunConfig::load(&p).unwrap();
    assert_eq!(c.k, 3);
    assert_eq!(c.sandbox.backend, "local");
    let code = c.model("code_agent");
    assert_eq!(
        (code.provider.as_str(), code.model.as_str()),
        ("openai", "m1")
    );
    assert_eq!(code.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
    let ev = c.model("evolve");
    assert_eq!((ev.provider.as_str(), ev.model.as_str()), ("openai", "m2"));
    assert_eq!(ev.price_input_per_mtok, 3.0);
}

#[test]
fn quickstart_config_loads_and_caps_turns() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let c = RunConfig::load(&root.join("quickstart.toml")).unwrap();
    assert_eq!((c.k, c.iterations), (1, 1));
    assert_eq!(c.sandbox.backend, "auto");
    for r in ROLES {
        assert_eq!(c.model(r).provider, "local", "{r}");
    }
    let mut h = ahe_harness::load(&root.join("../harness-seed")).unwrap();
    assert_eq!(h.agent.limits.max_turns, 100);
    c.agent.cap(&mut h);
    assert_eq!(h.agent.limits.max_turns, c.agent.max_turns.unwrap());
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "z.toml",
        "[benchmark]\npath = \"x\"\n[agent]\nmax_turns = 0\n",
    );
    let e = RunConfig::load(&p).unwrap_err().to_string();
    assert!(e.contains("agent.max_turns"), "{e}");
}

#[test]
fn errors_name_file_and_key() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "a.toml",
        "[benchmark]\npath = \"x\"\n[sandbox]\nconcurrancy = 2\n",
    );
    let e = RunConfig::load(&p).unwrap_err().to_string();
    assert!(
        e.contains("a.toml") && e.contains("sandbox") && e.contains("concurrancy"),
        "{e}"
    );

    let p = write(
        d.path(),
        "b.toml",
        "k = \"two\"\n[benchmark]\npath = \"x\"\n",
    );
    let e = RunConfig::load(&p).unwrap_err().to_string();
    assert!(e.contains("b.toml") && e.contains("k"), "{e}");

    let p = write(
        d.path(),
        "c.toml",
        "[benchmark]\npath = \"x\"\n[sandbox]\nbackend = \"vm\"\n",
    );
    let e = RunConfig::load(&p).unwrap_err().to_string();
    assert!(
        e.contains("sandbox.backend") && e.contains("auto, docker, local"),
        "{e}"
    );

    let p = write(
        d.path(),
        "d.toml",
        "[benchmark]\npath = \"${AHE_TEST_NOPE_UNSET}\"\n",
    );
    let e = RunConfig::load(&p).unwrap_err().to_string();
    assert!(
        e.contains("benchmark.path") && e.contains("AHE_TEST_NOPE_UNSET"),
        "{e}"
    );

    let p = write(
        d.path(),
        "e.toml",
        "[benchmark]\npath = \"x\"\n[models.default]\nprovider = \"gpt\"\n",
    );
    let e = RunConfig::load(&p).unwrap_err().to_string();
    assert!(
        e.contains("models.code_agent") && e.contains("provider"),
        "{e}"
    );

    let p = write(
        d.path(),
        "f.toml",
        "extends = \"f.toml\"\n[benchmark]\npath = \"x\"\n",
    );
    let e = format!("{:#}", RunConfig::load(&p).unwrap_err());
    assert!(e.contains("cycle"), "{e}");

    let p = write(
        d.path(),
        "g.toml",
        "[benchmark]\npath = \"x\"\n[attribution]\nunjudged = \"ignore\"\n",
    );
    let e = RunConfig::load(&p).unwrap_err().to_string();
    assert!(
        e.contains("attribution.unjudged") && e.contains("revert") && e.contains("keep"),
        "{e}"
    );
}

#[test]
fn sandbox_hosts_parse_validate_and_size_the_concurrency() {
    let d = tempfile::tempdir().unwrap();
    let cfg = |name: &str, sandbox: &str| {
        let text = format!("[benchmark]\npath = \"x\"\n[sandbox]\n{sandbox}\n");
        RunConfig::load(&write(d.path(), name, &text))
    };
    let hosts = "hosts = [{url = \"unix:///run/a.sock\", capacity = 3}, {name = \"far\", \
                 url = \"tcp://10.0.0.5:2376\", capacity = 5, tls = {ca = \"ca.pem\", cert = \
                 \"cert.pem\", key = \"key.pem\"}}]";
    let c = cfg("a.toml", hosts).unwrap();
    assert_eq!(c.sandbox.hosts.len(), 2);
    assert_eq!(c.sandbox.hosts[1].label(), "far");
    assert_eq!(c.sandbox.hosts[0].label(), "unix:///run/a.sock");
    assert_eq!(
        c.sandbox.hosts[1].tls.as_ref().unwrap().ca,
        Path::new("ca.pem")
    );
    // No concurrency given: the sum of the capacities; given: kept.
    assert_eq!(c.sandbox.concurrency, 8);
    let c = cfg("b.toml", &format!("concurrency = 2\n{hosts}")).unwrap();
    assert_eq!(c.sandbox.concurrency, 2);
    // Without hosts nothing changes (the one engine of DOCKER_HOST).
    let c = cfg("c.toml", "backend = \"docker\"").unwrap();
    assert!(c.sandbox.hosts.is_empty());
    assert_eq!(c.sandbox.concurrency, 4);
    // Errors name the field.
    let bad = |name: &str, sandbox: &str, want: &str| {
        let e = format!("{:#}", cfg(name, sandbox).unwrap_err());
        assert!(e.contains(want), "{e}");
    };
    bad(
        "d.toml",
        "hosts = [{url = \"unix:///a.sock\", capacity = 0}]",
        "sandbox.hosts[0].capacity: must be at least 1",
    );
    bad("e.toml", "hosts = [{url = \"unix:///a.sock\"}]", "capacity");
    bad(
        "f.toml",
        "hosts = [{url = \"unix:///a.sock\", capacity = 1, cap = 2}]",
        "unknown field `cap`",
    );
    bad(
        "g.toml",
        "hosts = [{url = \"10.0.0.5:2375\", capacity = 1}]",
        "sandbox.hosts[0].url",
    );
    bad(
        "h.toml",
        "backend = \"local\"\nhosts = [{url = \"unix:///a.sock\", capacity = 1}]",
        "sandbox.hosts: lists Docker engines, but sandbox.backend = \"local\"",
    );
}

#[test]
fn sandbox_harbor_parses_and_misuse_is_named() {
    let d = tempfile::tempdir().unwrap();
    let base = "[benchmark]\npath = \"benchmarks/smoke\"\n";
    let p = write(
        d.path(),
        "h.toml",
        &format!(
            "{base}[sandbox]\nbackend = \"harbor\"\n[sandbox.harbor]\nenvironment = \"daytona\"\n\
             venv = \"/opt/hv\"\noptions = {{ snapshot = \"x\", auto_stop_interval_mins = 5 }}\n"
        ),
    );
    let c = RunConfig::load(&p).unwrap();
    let h = c.sandbox.harbor.unwrap();
    assert_eq!(h.environment, "daytona");
    assert_eq!(h.venv.as_deref(), Some(Path::new("/opt/hv")));
    assert_eq!(h.options["auto_stop_interval_mins"], serde_json::json!(5));
    assert_eq!(
        h.exec,
        ahe_sandbox::harbor::HarborExec::Engine,
        "the default"
    );
    let p = write(
        d.path(),
        "e.toml",
        &format!("{base}[sandbox]\nbackend = \"harbor\"\n[sandbox.harbor]\nexec = \"harbor\"\n"),
    );
    let h = RunConfig::load(&p).unwrap().sandbox.harbor.unwrap();
    assert_eq!(h.exec, ahe_sandbox::harbor::HarborExec::Harbor);
    // [sandbox.harbor] under another backend, an unknown key, hosts with harbor.
    for (text, needle) in [
        (
            "[sandbox]\nbackend = \"docker\"\n[sandbox.harbor]\n",
            "sandbox.harbor: configures",
        ),
        (
            "[sandbox]\nbackend = \"harbor\"\n[sandbox.harbor]\nenv = \"docker\"\n",
            "env",
        ),
        (
            "[sandbox]\nbackend = \"harbor\"\n[sandbox.harbor]\nexec = \"compose\"\n",
            "exec",
        ),
        (
            "[sandbox]\nbackend = \"harbor\"\nhosts = [{url = \"unix:///x.sock\"}]\n",
            "sandbox.hosts",
        ),
    ] {
        let p = write(d.path(), "bad.toml", &format!("{base}{text}"));
        let e = format!("{:#}", RunConfig::load(&p).unwrap_err());
        assert!(e.contains(needle), "{text}: {e}");
    }
}
