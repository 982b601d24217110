//! A child process with a time limit (shared by `common` and the attribution simulation,
//! which an example also includes).

use std::process::{Command, Output};

/// How long one child `ahe` of a test may run (`AHE_TEST_CHILD_SECS`, default 900 s): a hang
/// becomes a failing test that names the command and shows what it printed, instead of a test
/// binary that never ends (and a CI run that only times out, printing nothing of why).
fn child_limit() -> std::time::Duration {
    let secs = std::env::var("AHE_TEST_CHILD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(900);
    std::time::Duration::from_secs(secs)
}

/// `c.output()`, but killed (SIGKILL) and failed with its output so far after [`child_limit`].
pub fn output_within(mut c: Command) -> Output {
    use std::io::Read;
    use std::process::Stdio;
    let what = format!("{c:?}");
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > child_limit() {
            let _ = child.kill();
            let _ = child.wait();
            let (o, e) = (out.join().unwrap(), err.join().unwrap());
            let tail = |b: &[u8]| {
                let t = String::from_utf8_lossy(b).to_string();
                let mut i = t.len().saturating_sub(4000);
                while !t.is_char_boundary(i) {
                    i += 1;
                }
                t[i..].to_string()
            };
            panic!(
                "{what} did not end within {:?} (AHE_TEST_CHILD_SECS); killed. stdout tail:\n{}\nstderr tail:\n{}",
                child_limit(),
                tail(&o),
                tail(&e)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}
