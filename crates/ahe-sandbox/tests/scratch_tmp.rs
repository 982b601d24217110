use ahe_sandbox::local::LocalBackend;
use ahe_sandbox::{ExecOpts, Sandbox, SandboxSpec};
use std::time::Instant;
fn ticks(s: &str) -> u64 {
    let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
    (11..15).map(|i| f[i].parse::<u64>().unwrap()).sum()
}
#[tokio::test(flavor = "multi_thread")]
async fn only_sandbox() {
    let sb = LocalBackend::bubblewrap()
        .create_local(&SandboxSpec {
            task: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let self_ru = || unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut r);
        (r.ru_utime.tv_sec * 1000000
            + r.ru_utime.tv_usec
            + r.ru_stime.tv_sec * 1000000
            + r.ru_stime.tv_usec) as f64
            / 1000.0
    };
    for _ in 0..3 {
        let a = ticks(
            &sb.exec("cat /proc/$PPID/stat", ExecOpts::default())
                .await
                .unwrap()
                .stdout,
        );
        let h = self_ru();
        let t = Instant::now();
        for _ in 0..300 {
            sb.exec("true", ExecOpts::default()).await.unwrap();
        }
        let wall = t.elapsed() / 300;
        let h = (self_ru() - h) / 300.0;
        let b = ticks(
            &sb.exec("cat /proc/$PPID/stat", ExecOpts::default())
                .await
                .unwrap()
                .stdout,
        );
        eprintln!(
            "wall {wall:?} worker cpu {:.2} ms host cpu {h:.2} ms",
            (b - a) as f64 * 10.0 / 300.0
        );
    }
    sb.destroy().await.unwrap();
}
