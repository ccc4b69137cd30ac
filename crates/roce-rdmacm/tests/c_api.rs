//! librdmacm's calls seen from C: `tests/c/cm_api.c`, built against
//! rdma-core's headers and linked against its libraries, run over this
//! crate's library and roce's libibverbs (both preloaded, as `roce exec`
//! does), one scenario a process, on a loopback address of its own.
//!
//! cargo does not rebuild a cdylib for its own crate's integration tests:
//! a library older than the crate's sources fails the test with the
//! command to run. Without the headers or a C compiler the tests say so
//! and pass, except under CI (`roce_test_support::in_ci`), where they fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use roce_test_support::{built_cdylib, in_ci};

const LIMIT: Duration = Duration::from_secs(60);

fn skip(msg: &str) {
    assert!(!in_ci(), "{msg}: CI must run the librdmacm C tests");
    eprintln!("SKIPPED: {msg}");
}

fn program() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !Path::new("/usr/include/rdma/rdma_cma.h").exists() {
                skip("missing <rdma/rdma_cma.h> (apt-get install librdmacm-dev)");
                return None;
            }
            let dir = std::env::temp_dir().join(format!("roce-rdmacm-c-api-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let exe = dir.join("cm_api");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cm_api.c");
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let built = match Command::new(&cc)
                .args(["-Wall", "-g"])
                .arg(&src)
                .arg("-o")
                .arg(&exe)
                .args(["-lrdmacm", "-libverbs"])
                .output()
            {
                Ok(o) => o,
                Err(e) => {
                    skip(&format!("no C compiler ({cc}: {e})"));
                    return None;
                }
            };
            assert!(
                built.status.success(),
                "cm_api.c did not build:\n{}",
                String::from_utf8_lossy(&built.stderr)
            );
            Some(exe)
        })
        .as_deref()
}

/// Runs a scenario on a device at `ip` (RoCEv2's port) and returns its
/// success and output.
fn run(scenario: &str, ip: &str) -> (bool, String) {
    let exe = program().expect("built");
    let preload = format!(
        "{}:{}",
        built_cdylib("libroce_ibverbs.so", "roce-ibverbs").display(),
        built_cdylib("libroce_rdmacm.so", "roce-rdmacm").display()
    );
    let mut child = Command::new(exe)
        .args([scenario, ip])
        .env("ROCE_DEVICES", format!("roce0={ip}"))
        .env("LD_PRELOAD", preload)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("scenario {scenario} did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (status.success(), text)
}

#[test]
fn ids_events_routes_qps_and_endpoints_without_the_wire() {
    if program().is_none() {
        return;
    }
    let (ok, out) = run("local", "127.0.25.11");
    assert!(ok && out.contains("ok"), "{out}");
}
