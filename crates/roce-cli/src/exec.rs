//! `roce exec`: runs an unmodified verbs program over roce's libibverbs
//! (`crates/roce-ibverbs`). It preloads the library, whose soname is
//! `libibverbs.so.1`, so the program's own `libibverbs.so.1` dependency
//! resolves to it, and names the device in `ROCE_DEVICES`; then it
//! replaces itself with the program.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The device's address (its GID); the UDP socket binds it.
    #[arg(long, default_value = "127.0.0.1")]
    pub addr: IpAddr,
    /// The device's UDP port (RoCEv2's 4791; peers must use the same).
    #[arg(long, default_value_t = 4791)]
    pub udp_port: u16,
    /// The device's name, as `ibv_get_device_name` reports it (`-d` of
    /// perftest and the pingpong examples).
    #[arg(long, default_value = "roce0")]
    pub name: String,
    /// The library to load (default: `ROCE_IBVERBS_LIB`, else found beside
    /// this executable).
    #[arg(long)]
    pub lib: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub program: Vec<OsString>,
}

/// Why roce's libibverbs cannot be found.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    /// The path of this executable is unknown, so nothing is beside it.
    #[error("cannot find this executable: {0}")]
    NoExecutable(std::io::Error),
    /// The executable's path has no parent directory.
    #[error("this executable has no directory")]
    NoDirectory,
    /// None of the places the library is installed or built holds it.
    #[error(
        "roce's libibverbs not found beside {} (build it: cargo build -p roce-ibverbs; or give --lib)",
        exe.display()
    )]
    NotFound { exe: PathBuf },
}

/// Where the library is: beside the `roce` binary (installed as
/// `libibverbs.so.1` or as cargo builds it), or in cargo's `deps`.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf, LibraryError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("ROCE_IBVERBS_LIB") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(LibraryError::NoExecutable)?;
    let dir = exe.parent().ok_or(LibraryError::NoDirectory)?;
    let candidates = [
        dir.join("libibverbs.so.1"),
        dir.join("libroce_ibverbs.so"),
        dir.join("deps/libroce_ibverbs.so"),
        dir.join("../lib/roce/libibverbs.so.1"),
    ];
    // cargo leaves a copy beside the binary only when the library itself is
    // built, and one in `deps` when roce-cli is: the newer is the current one.
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let found = candidates.iter().filter(|p| p.is_file()).max_by_key(|p| modified(p)).cloned();
    found.ok_or(LibraryError::NotFound { exe })
}

/// The environment a program needs to run over the library.
pub fn environment(args: &ExecArgs, lib: &Path) -> Vec<(String, OsString)> {
    let dev = SocketAddr::new(args.addr, args.udp_port);
    let mut preload = OsString::from(lib.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    vec![
        ("ROCE_DEVICES".to_string(), OsString::from(format!("{}={dev}", args.name))),
        ("LD_PRELOAD".to_string(), preload),
    ]
}

pub fn main(args: &ExecArgs) -> ExitCode {
    if args.name.is_empty() || args.name.contains([',', '=']) {
        eprintln!("roce exec: bad device name {:?}", args.name);
        return ExitCode::from(2);
    }
    if args.addr.is_unspecified() {
        eprintln!("roce exec: --addr must be a specific address (it is the device's GID)");
        return ExitCode::from(2);
    }
    let lib = match find_library(args.lib.as_deref()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("roce exec: {e}");
            return ExitCode::from(2);
        }
    };
    let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
    let mut cmd = std::process::Command::new(&args.program[0]);
    cmd.args(&args.program[1..]);
    for (k, v) in environment(args, &lib) {
        cmd.env(k, v);
    }
    // Only returns if the program could not be started.
    let e = cmd.exec();
    eprintln!("roce exec: {}: {e}", args.program[0].to_string_lossy());
    ExitCode::from(127)
}
