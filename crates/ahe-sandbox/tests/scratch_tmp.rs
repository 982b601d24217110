use ahe_sandbox::local::LocalBackend;
use ahe_sandbox::{ExecOpts, Sandbox, SandboxSpec};
#[tokio::test(flavor = "multi_thread")]
async fn trace() {
    let sb = LocalBackend::bubblewrap()
        .create_local(&SandboxSpec {
            task: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for _ in 0..5 {
        sb.exec("true", ExecOpts::default()).await.unwrap();
    }
    std::env::set_var("AHE_TRACE", "1");
    for _ in 0..8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        sb.exec("true", ExecOpts::default()).await.unwrap();
        let e = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        eprintln!("X start {t:.6} end {e:.6} total {:.2}ms", (e - t) * 1000.0);
    }
}
