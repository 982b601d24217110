use std::time::Instant;
use ahe_sandbox::{Backend, Sandbox, ExecOpts, SandboxSpec};
#[tokio::main]
async fn main() {
    let b = ahe_sandbox::local::LocalBackend::bubblewrap();
    let spec = SandboxSpec::default();
    for with_exec in [false, true, false, true] {
        let mut c = 0.0; let mut d = 0.0; let mut e = 0.0;
        for _ in 0..20 {
            let t = Instant::now();
            let sb = b.create(&spec).await.unwrap();
            c += t.elapsed().as_secs_f64();
            let t = Instant::now();
            if with_exec { sb.exec("true", ExecOpts::default()).await.unwrap(); }
            e += t.elapsed().as_secs_f64();
            let t = Instant::now();
            sb.destroy().await.unwrap();
            d += t.elapsed().as_secs_f64();
        }
        println!("exec={with_exec}: create {:.2} exec {:.2} destroy {:.2} ms", c*50.0, e*50.0, d*50.0);
    }
}
