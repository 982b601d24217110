//! A real Distribution registry (Debian's `docker-registry`) on 127.0.0.1 for the pull tests,
//! plain or with htpasswd auth, and small test images (the host's static busybox, ~2 MB)
//! pushed to it through the Engine API and removed locally.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ahe_sandbox::docker::DockerBackend;
use futures_util::StreamExt;

/// The registry binary (scripts/setup.sh installs the `docker-registry` package).
pub const REGISTRY_BIN: &str = "docker-registry";

/// Whether the registry tests can run (engine, base image, registry binary, htpasswd);
/// panics under `CI=true` when they cannot.
pub fn ready() -> bool {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let missing = if !DockerBackend::available() {
        Some("no Docker engine answers".to_string())
    } else if !Command::new("docker")
        .args(["image", "inspect", "ahe-base:bookworm"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        Some("ahe-base:bookworm is missing (scripts/build-base-image.sh)".into())
    } else if which(REGISTRY_BIN).is_none() {
        Some(format!(
            "{REGISTRY_BIN} is not installed (scripts/setup.sh installs it)"
        ))
    } else if which("htpasswd").is_none() {
        Some("htpasswd is not installed (apache2-utils; scripts/setup.sh installs it)".into())
    } else {
        None
    };
    match missing {
        None => true,
        Some(m) => {
            assert!(!ci, "{m} (required when CI=true)");
            eprintln!("note: {m}; skipping the registry tests");
            false
        }
    }
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file())
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running registry; stopped (and its storage removed) on drop.
pub struct Registry {
    child: Option<Child>,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// User and password when it requires them.
    pub auth: Option<(String, String)>,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry on a free port; with `auth`, htpasswd (bcrypt) basic auth.
    pub fn start(auth: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut cfg = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
            dir.path().join("data").display()
        );
        if let Some((user, pass)) = auth {
            let htpasswd = dir.path().join("htpasswd");
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, pass])
                .output()
                .unwrap();
            assert!(out.status.success(), "htpasswd failed");
            std::fs::write(&htpasswd, &out.stdout).unwrap();
            cfg.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: ahe-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        let config = dir.path().join("config.yml");
        std::fs::write(&config, cfg).unwrap();
        let mut r = Registry {
            child: None,
            addr,
            auth: auth.map(|(u, p)| (u.to_string(), p.to_string())),
            config,
            _dir: dir,
        };
        r.run();
        r
    }

    /// (Re)starts the registry process and waits until `/v2/` answers.
    fn run(&mut self) {
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&self.config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if std::net::TcpStream::connect(&self.addr).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the registry at {} did not start", self.addr);
    }

    /// Stops the registry process (its port then refuses connections).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `docker login`-style credentials for the engine.
    fn credentials(&self) -> Option<bollard::auth::DockerCredentials> {
        self.auth
            .as_ref()
            .map(|(u, p)| bollard::auth::DockerCredentials {
                username: Some(u.clone()),
                password: Some(p.clone()),
                serveraddress: Some(self.addr.clone()),
                ..Default::default()
            })
    }

    /// The reference `ADDR/ahe-test/NAME:TAG` of a test image in this registry (pushed or not).
    pub fn reference(&self, name: &str) -> String {
        format!("{}/ahe-test/{name}:t{}", self.addr, std::process::id())
    }

    /// Builds a ~2 MB image of the host's static busybox (`/bin/sh`, and a `/bin/bash` that
    /// runs it, for the oracle's `bash solve.sh`) + `/source` = "registry", tags it
    /// `ADDR/ahe-test/NAME:TAG`, pushes it through the Engine API, removes it locally, and
    /// returns the reference. Small on purpose: a push gzips every layer in the engine
    /// (`FROM ahe-base:bookworm`, 487 MB, cost ~20 s of CPU per push).
    pub fn push_test_image(&self, name: &str) -> String {
        let reference = self.reference(name);
        let ctx = tempfile::tempdir().unwrap();
        let busybox = ahe_bench::inside::busybox().expect("a static busybox (scripts/setup.sh)");
        std::fs::copy(&busybox, ctx.path().join("busybox")).unwrap();
        let bash = "#!/bin/busybox sh\nexec /bin/busybox sh \"$@\"\n";
        std::fs::write(
            ctx.path().join("Dockerfile"),
            format!(
                "FROM scratch\nCOPY busybox /bin/busybox\n\
                 RUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox mkdir -p /usr/bin /sbin \
                 /usr/sbin /tmp /root /etc && /bin/busybox --install -s && chmod 1777 /tmp && \
                 echo root:x:0:0:root:/root:/bin/sh > /etc/passwd && echo root:x:0: > /etc/group\"]\n\
                 COPY bash /bin/bash\n\
                 RUN echo registry > /source && echo {reference} > /pushed-as\nWORKDIR /app\n"
            ),
        )
        .unwrap();
        std::fs::write(ctx.path().join("bash"), bash).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            ctx.path().join("bash"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let build = Command::new("docker")
            .args(["build", "-q", "-t", &reference])
            .arg(ctx.path())
            .output()
            .unwrap();
        assert!(
            build.status.success(),
            "docker build failed: {}",
            String::from_utf8_lossy(&build.stderr)
        );
        let creds = self.credentials();
        let r = reference.clone();
        rt().block_on(async move {
            let docker = bollard::Docker::connect_with_defaults().unwrap();
            let (repo, tag) = r.rsplit_once(':').unwrap();
            let opts = bollard::query_parameters::PushImageOptionsBuilder::default()
                .tag(tag)
                .build();
            let mut s = docker.push_image(repo, Some(opts), creds);
            while let Some(item) = s.next().await {
                let info = item.expect("push");
                assert!(
                    info.error_detail.is_none(),
                    "push failed: {:?}",
                    info.error_detail
                );
            }
            docker
                .remove_image(
                    &r,
                    None::<bollard::query_parameters::RemoveImageOptions>,
                    None,
                )
                .await
                .expect("removing the pushed image locally");
        });
        assert!(!image_exists(&reference), "{reference} is still local");
        reference
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A current-thread runtime for the Engine API calls of a test.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Whether the local engine has an image.
pub fn image_exists(reference: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", reference])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Removes an image locally (ignoring "no such image").
pub fn remove_image(reference: &str) {
    let _ = Command::new("docker")
        .args(["image", "rm", "-f", reference])
        .output();
}

/// Writes a one-task benchmark whose task names `image` and whose `environment/` builds
/// `FROM base` with `/source` = "build"; the oracle writes the answer the test checks, and
/// the verifier prints `/source` (which image the trial ran in).
pub fn task_bench(root: &Path, task: &str, image: Option<&str>, base: &str) -> PathBuf {
    let bench = root.join("bench");
    let t = bench.join(task);
    std::fs::create_dir_all(t.join("environment")).unwrap();
    std::fs::create_dir_all(t.join("tests")).unwrap();
    std::fs::create_dir_all(t.join("solution")).unwrap();
    let image_line = image
        .map(|i| format!("docker_image = \"{i}\"\n"))
        .unwrap_or_default();
    std::fs::write(
        t.join("task.toml"),
        format!(
            "schema_version = \"1.1\"\n[metadata]\ndifficulty = \"easy\"\ncategory = \"test\"\n[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n[environment]\n{image_line}cpus = 1\nmemory_mb = 512\nallow_internet = false\n"
        ),
    )
    .unwrap();
    std::fs::write(t.join("instruction.md"), "Write 42 to /app/answer.txt.\n").unwrap();
    std::fs::write(
        t.join("environment/Dockerfile"),
        format!("FROM {base}\nRUN echo build > /source\nWORKDIR /app\n"),
    )
    .unwrap();
    std::fs::write(
        t.join("solution/solve.sh"),
        "#!/bin/bash\necho 42 > /app/answer.txt\n",
    )
    .unwrap();
    std::fs::write(
        t.join("tests/test.sh"),
        "#!/bin/bash\necho \"source=$(cat /source)\"\nif [ \"$(cat /app/answer.txt)\" = 42 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    )
    .unwrap();
    bench
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                if let Ok(b) = std::fs::read(&p) {
                    if b.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}
