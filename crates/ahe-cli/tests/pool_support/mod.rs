//! Three extra real Docker engines for the multi-host tests, started by the tests themselves
//! (once per machine; engines already running are reused and left running afterwards).
//!
//! Engine N (1–3 here; 4 is the off-host adversarial suite's, `cli::adversarial_offhost`) has its own data root `/var/lib/ahe-pool-N`, exec root `/run/ahe-pool-N`,
//! pid file `/run/ahe-pool-N.pid`, socket `unix:///run/ahe-pool-N.sock`, log
//! `/var/log/ahe-pool-N.log` and bridge `ahe-pool-N` (10.213.N.1/24, made here with `ip
//! link`; never `--bridge=none`, which would delete the main engine's docker0), no iptables
//! rules of its own, and `ahe-base:bookworm` copied in from the main engine. Engine 3 also
//! serves TLS on tcp://127.0.0.1:23763 with certificates made here with `openssl` (in
//! `/var/lib/ahe-pool-tls`). Stop one with `kill $(cat /run/ahe-pool-N.pid)`.
//!
//! Without root or `dockerd` the tests print a loud note and pass, except under `CI=true`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The base image every task builds from.
pub const BASE: &str = "ahe-base:bookworm";

/// Where engine 3's TLS certificates live.
pub const TLS_DIR: &str = "/var/lib/ahe-pool-tls";

/// Engine 3's TLS address.
pub const TLS_ADDR: &str = "127.0.0.1:23763";

/// One extra engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Engine(pub u32);

/// Runs a command; `Err` with its output when it fails.
fn sh(cmd: &mut Command) -> Result<String, String> {
    let o = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ))
    }
}

impl Engine {
    /// `ahe-pool-N`.
    pub fn name(&self) -> String {
        format!("ahe-pool-{}", self.0)
    }

    /// The unix socket path.
    pub fn sock(&self) -> PathBuf {
        PathBuf::from(format!("/run/{}.sock", self.name()))
    }

    /// `unix:///run/ahe-pool-N.sock`.
    pub fn url(&self) -> String {
        format!("unix://{}", self.sock().display())
    }

    fn pidfile(&self) -> PathBuf {
        PathBuf::from(format!("/run/{}.pid", self.name()))
    }

    /// `docker -H <this engine> ARGS`.
    pub fn docker(&self, args: &[&str]) -> Result<String, String> {
        sh(Command::new("docker").arg("-H").arg(self.url()).args(args))
    }

    /// Whether the engine answers (and, for engine 3, its TLS port accepts connections).
    pub fn answers(&self) -> bool {
        let unix = self
            .docker(&["version", "-f", "{{.Server.Version}}"])
            .is_ok();
        unix && (self.0 != 3 || std::net::TcpStream::connect(TLS_ADDR).is_ok())
    }

    /// The daemon's pid, while it runs (a zombie does not count: init may never reap it).
    pub fn pid(&self) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.pidfile())
            .ok()?
            .trim()
            .parse()
            .ok()?;
        alive(pid).then_some(pid)
    }

    /// Kills the daemon with `sig` and waits until it is gone (its containers' shims live
    /// on until it restarts); its pid file goes too, since dockerd refuses to start while
    /// the pid it names has a /proc entry, as a zombie has.
    pub fn kill(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = sh(Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string()));
            let t0 = Instant::now();
            while alive(pid) && t0.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if self.pid().is_none() {
            let _ = std::fs::remove_file(self.pidfile());
        }
        self.clear_containerd();
    }

    /// Ends the containerd a killed daemon left (it dies with its daemon, but may stay a
    /// zombie that init never reaps) and removes its pid file: a new daemon would otherwise
    /// take it for running and wait for its socket in vain.
    fn clear_containerd(&self) {
        let file = format!("/run/{}/containerd/containerd.pid", self.name());
        let Some(pid) = std::fs::read_to_string(&file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        else {
            return;
        };
        if self.pid().is_some() {
            return;
        }
        if alive(pid) {
            let _ = sh(Command::new("kill").arg("-KILL").arg(pid.to_string()));
            let t0 = Instant::now();
            while alive(pid) && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = std::fs::remove_file(&file);
    }

    /// Ids of the containers (any state) carrying `label` (`k=v` or `k`).
    pub fn containers(&self, label: &str) -> Vec<String> {
        self.docker(&["ps", "-aq", "--filter", &format!("label={label}")])
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect()
    }

    /// Ids of the running containers carrying `label`.
    pub fn running(&self, label: &str) -> Vec<String> {
        self.docker(&["ps", "-q", "--filter", &format!("label={label}")])
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect()
    }

    /// Starts the daemon unless it answers, and waits until it does; copies the base image
    /// in when it lacks it.
    pub fn start(&self) -> Result<(), String> {
        if !self.answers() {
            self.launch()?;
        }
        if self.docker(&["image", "inspect", BASE]).is_err() {
            let copy = format!("docker save {BASE} | docker -H {} load", self.url());
            sh(Command::new("sh").args(["-c", &copy]))?;
        }
        Ok(())
    }

    /// Makes the bridge and dirs, and runs `dockerd` in its own process group.
    fn launch(&self) -> Result<(), String> {
        // A daemon that runs but does not answer as wanted (e.g. no TLS yet) is restarted.
        self.kill("TERM");
        self.clear_containerd();
        let name = self.name();
        if sh(Command::new("ip").args(["link", "show", &name])).is_err() {
            sh(Command::new("ip").args(["link", "add", &name, "type", "bridge"]))?;
            let addr = format!("10.213.{}.1/24", self.0);
            sh(Command::new("ip").args(["addr", "add", &addr, "dev", &name]))?;
        }
        sh(Command::new("ip").args(["link", "set", &name, "up"]))?;
        let data = format!("/var/lib/{name}");
        let exec = format!("/run/{name}");
        for d in [&data, &exec] {
            std::fs::create_dir_all(d).map_err(|e| format!("{d}: {e}"))?;
        }
        // An empty config: nothing of /etc/docker/daemon.json (hosts, bridge...) applies.
        let config = format!("/run/{name}.json");
        std::fs::write(&config, "{}\n").map_err(|e| format!("{config}: {e}"))?;
        let log_path = format!("/var/log/{name}.log");
        let pidfile = self.pidfile().display().to_string();
        let mut args: Vec<String> = [
            "--config-file",
            &config,
            "--data-root",
            &data,
            "--exec-root",
            &exec,
            "--pidfile",
            &pidfile,
            "-H",
            &self.url(),
            "--bridge",
            &name,
            "--iptables=false",
            "--ip-masq=false",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--cgroup-parent=/{name}"));
        if self.0 == 3 {
            tls_files()?;
            args.extend([
                "-H".to_string(),
                format!("tcp://{TLS_ADDR}"),
                "--tlsverify".to_string(),
                format!("--tlscacert={TLS_DIR}/ca.pem"),
                format!("--tlscert={TLS_DIR}/server-cert.pem"),
                format!("--tlskey={TLS_DIR}/server-key.pem"),
            ]);
        }
        // Detached (its own session, re-parented to init): no zombie of ours keeps its pid
        // file looking alive after a kill, and no signal to the tests reaches it.
        let detach = format!("setsid dockerd \"$@\" >>{log_path} 2>&1 </dev/null &");
        // Not the test's TMPDIR: runc keeps its exec state there, and a daemon left running
        // would outlive a temporary one (every later `docker exec` on it then fails).
        let mut launch = Command::new("sh");
        launch
            .env_remove("TMPDIR")
            .args(["-c", &detach, "sh"])
            .args(&args);
        sh(&mut launch)?;
        let t0 = Instant::now();
        while !self.answers() {
            if t0.elapsed() > Duration::from_secs(60) {
                let tail = std::fs::read_to_string(&log_path).unwrap_or_default();
                let lines: Vec<&str> = tail.lines().rev().take(15).collect();
                return Err(format!(
                    "{name} did not answer within 60 s; {log_path} ends:\n{}",
                    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }
}

/// Whether `pid` runs and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Makes a CA, a server certificate for 127.0.0.1 and a client certificate (once).
pub fn tls_files() -> Result<(), String> {
    let d = Path::new(TLS_DIR);
    if d.join("cert.pem").is_file() && d.join("server-cert.pem").is_file() {
        return Ok(());
    }
    std::fs::create_dir_all(d).map_err(|e| format!("{TLS_DIR}: {e}"))?;
    let script = r#"set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 3650 -subj /CN=ahe-test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 3650 -extfile server.ext 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout key.pem -out client.csr -subj /CN=ahe-test-client 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out cert.pem -days 3650 -extfile client.ext 2>/dev/null
"#;
    sh(Command::new("sh").args(["-c", script]).current_dir(d)).map(|_| ())
}

/// Why this machine cannot run the engines, if it cannot.
fn unable() -> Option<String> {
    let root = sh(Command::new("id").arg("-u")).is_ok_and(|u| u.trim() == "0");
    if !root {
        return Some("not root (the extra engines need root)".into());
    }
    if sh(Command::new("sh").args(["-c", "command -v dockerd"])).is_err() {
        return Some("no dockerd (scripts/setup.sh installs docker.io)".into());
    }
    if sh(Command::new("docker").args(["image", "inspect", BASE])).is_err() {
        return Some(format!(
            "the main engine lacks {BASE} (scripts/build-base-image.sh)"
        ));
    }
    if sh(Command::new("sh").args(["-c", "command -v openssl && command -v ip"])).is_err() {
        return Some("no openssl or ip".into());
    }
    None
}

/// Engine `n` alone, started when needed, with the base image; `None` (after a loud note)
/// when this machine cannot run it. Under `CI=true` that is a failure.
pub fn engine(n: u32) -> Option<Engine> {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if let Some(why) = unable() {
        assert!(!ci, "engine {n} cannot run: {why} (required when CI=true)");
        eprintln!("NOTE: SKIPPING the extra-engine part of this test: {why}");
        return None;
    }
    let e = Engine(n);
    if let Err(why) = e.start() {
        panic!("starting {}: {why}", e.name());
    }
    Some(e)
}

/// Engines 1–3, started (in parallel) when needed, with the base image; `None` (after a
/// loud note) when this machine cannot run them. Under `CI=true` that is a failure.
pub fn engines() -> Option<[Engine; 3]> {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if let Some(why) = unable() {
        assert!(
            !ci,
            "the multi-engine tests cannot run: {why} (required when CI=true)"
        );
        eprintln!("NOTE: SKIPPING the multi-engine docker test: {why}");
        return None;
    }
    // One start at a time (tests of one binary run in parallel threads).
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    let all = [Engine(1), Engine(2), Engine(3)];
    let t0 = Instant::now();
    let started: Vec<Result<(), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = all.iter().map(|e| s.spawn(move || e.start())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (e, r) in all.iter().zip(started) {
        if let Err(why) = r {
            panic!("starting {}: {why}", e.name());
        }
    }
    eprintln!(
        "engines ahe-pool-1..3 ready in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    Some(all)
}
