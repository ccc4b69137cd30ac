//! `roce exec`: runs an unmodified verbs program over roce's libibverbs
//! (`crates/roce-ibverbs`). It preloads the library, whose soname is
//! `libibverbs.so.1`, so the program's own `libibverbs.so.1` dependency
//! resolves to it, and names the device in `ROCE_DEVICES`; then it
//! replaces itself with the program.
//!
//! A program may also `dlopen("libibverbs.so")` (NCCL, Python's ctypes)
//! or `dlopen("libibverbs.so.1")`: the loader then looks the name up on
//! `LD_LIBRARY_PATH` before its cache, so `roce exec` puts a private
//! directory first on it (`LibDir`) whose `libibverbs.so` and
//! `libibverbs.so.1` are links to the library, and rdma-core's own is
//! never loaded beside ours. When the workspace's drop-in librdmacm
//! (`roce-rdmacm`, built as `libroce_rdmacm.so`) is beside the `roce`
//! binary, the directory has `librdmacm.so` and `librdmacm.so.1` too, so a
//! program linked against `librdmacm.so.1` loads it.

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
    /// The librdmacm to offer as `librdmacm.so.1` (default:
    /// `ROCE_RDMACM_LIB`, else the workspace's found beside this executable;
    /// none if there is none).
    #[arg(long)]
    pub rdmacm: Option<PathBuf>,
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
    newest_beside(dir, "libibverbs.so.1", "libroce_ibverbs.so").ok_or(LibraryError::NotFound { exe })
}

/// The workspace's librdmacm, if there is one: `explicit`, else
/// `ROCE_RDMACM_LIB`, else beside the `roce` binary as [`find_library`]
/// looks for libibverbs.
pub fn find_rdmacm(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("ROCE_RDMACM_LIB").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    newest_beside(exe.parent()?, "librdmacm.so.1", "libroce_rdmacm.so")
}

/// `installed` or cargo's `built` beside `dir` (the `roce` binary's), in
/// cargo's `deps`, or in `../lib/roce`.
fn newest_beside(dir: &Path, installed: &str, built: &str) -> Option<PathBuf> {
    let candidates = [
        dir.join(installed),
        dir.join(built),
        dir.join("deps").join(built),
        dir.join("../lib/roce").join(installed),
    ];
    // cargo leaves a copy beside the binary only when the library itself is
    // built, and one in `deps` when roce-cli is: the newer is the current one.
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    candidates.iter().filter(|p| p.is_file()).max_by_key(|p| modified(p)).cloned()
}

/// Why the private library directory cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum LibDirError {
    #[error("cannot make {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Someone else owns it, or others may write it: a program would load
    /// whatever they put there.
    #[error("{} is not a directory only this user may write (remove it)", path.display())]
    Unsafe { path: PathBuf },
}

/// The private directory `roce exec` puts first on `LD_LIBRARY_PATH`:
/// links under the names programs load (`libibverbs.so`,
/// `libibverbs.so.1`, and `librdmacm.so`, `librdmacm.so.1` when there is
/// a librdmacm) to the workspace's libraries. It lives under
/// `$XDG_RUNTIME_DIR` (else the temporary directory) in `roce-exec-UID`,
/// mode 0700 and checked to be this user's, one subdirectory per set of
/// targets (named by their hash), so concurrent `roce exec`s share it and
/// a later one with other libraries does not disturb an earlier one. The
/// program replaces `roce exec`, so nothing is left to remove it: it holds
/// only links and is reused.
pub struct LibDir {
    pub path: PathBuf,
}

impl LibDir {
    /// Makes (or reuses) the directory for `links`: (name, target).
    pub fn make(links: &[(&str, &Path)]) -> Result<LibDir, LibDirError> {
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute() && d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        Self::make_in(&base, links)
    }

    /// [`LibDir::make`] under `base` instead of the runtime directory.
    pub fn make_in(base: &Path, links: &[(&str, &Path)]) -> Result<LibDir, LibDirError> {
        let uid = owner_uid(Path::new("/proc/self"))
            .map_err(|source| LibDirError::Io { path: "/proc/self".into(), source })?;
        let top = base.join(format!("roce-exec-{uid}"));
        private_dir(&top, uid)?;
        let mut hash = Fnv::default();
        for (name, target) in links {
            hash.add(name.as_bytes());
            hash.add(target.as_os_str().as_encoded_bytes());
        }
        let path = top.join(format!("{:016x}", hash.0));
        private_dir(&path, uid)?;
        for (name, target) in links {
            let link = path.join(name);
            if std::fs::read_link(&link).is_ok_and(|t| t == *target) {
                continue;
            }
            // A fresh link renamed over the name: another `roce exec` may be
            // making the same one.
            let tmp = path.join(format!(".{name}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            let io = |source| LibDirError::Io { path: link.clone(), source };
            std::os::unix::fs::symlink(target, &tmp).map_err(io)?;
            std::fs::rename(&tmp, &link).map_err(io)?;
        }
        Ok(LibDir { path })
    }
}

fn owner_uid(p: &Path) -> std::io::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(p)?.uid())
}

/// `dir`, made with mode 0700 if missing, and checked to be a real
/// directory of `uid` that nobody else may write.
fn private_dir(dir: &Path, uid: u32) -> Result<(), LibDirError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(LibDirError::Io { path: dir.to_path_buf(), source }),
    }
    let m = std::fs::symlink_metadata(dir)
        .map_err(|source| LibDirError::Io { path: dir.to_path_buf(), source })?;
    if !m.file_type().is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err(LibDirError::Unsafe { path: dir.to_path_buf() });
    }
    Ok(())
}

/// FNV-1a, 64 bits: a stable name for a set of links.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().chain([0u8].iter()) {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The links of the private directory: libibverbs under both names, and
/// librdmacm under both if there is one.
pub fn links<'a>(ibverbs: &'a Path, rdmacm: Option<&'a Path>) -> Vec<(&'static str, &'a Path)> {
    let mut l = vec![("libibverbs.so", ibverbs), ("libibverbs.so.1", ibverbs)];
    if let Some(r) = rdmacm {
        l.extend([("librdmacm.so", r), ("librdmacm.so.1", r)]);
    }
    l
}

/// The environment a program needs to run over the library, with the
/// private library directory `lib_dir` first on `LD_LIBRARY_PATH`.
pub fn environment(args: &ExecArgs, lib: &Path, lib_dir: &Path) -> Vec<(String, OsString)> {
    let dev = SocketAddr::new(args.addr, args.udp_port);
    let prepend = |var: &str, first: &Path| {
        let mut v = OsString::from(first.as_os_str());
        if let Some(old) = std::env::var_os(var).filter(|o| !o.is_empty()) {
            v.push(":");
            v.push(old);
        }
        v
    };
    vec![
        ("ROCE_DEVICES".to_string(), OsString::from(format!("{}={dev}", args.name))),
        ("LD_PRELOAD".to_string(), prepend("LD_PRELOAD", lib)),
        ("LD_LIBRARY_PATH".to_string(), prepend("LD_LIBRARY_PATH", lib_dir)),
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
    let rdmacm = find_rdmacm(args.rdmacm.as_deref()).map(|r| std::fs::canonicalize(&r).unwrap_or(r));
    if let Some(r) = rdmacm.as_ref().filter(|r| !r.is_file()) {
        eprintln!("roce exec: librdmacm {} not found", r.display());
        return ExitCode::from(2);
    }
    let dir = match LibDir::make(&links(&lib, rdmacm.as_deref())) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("roce exec: {e}");
            return ExitCode::from(2);
        }
    };
    let mut cmd = std::process::Command::new(&args.program[0]);
    cmd.args(&args.program[1..]);
    for (k, v) in environment(args, &lib, &dir.path) {
        cmd.env(k, v);
    }
    // Only returns if the program could not be started.
    let e = cmd.exec();
    eprintln!("roce exec: {}: {e}", args.program[0].to_string_lossy());
    ExitCode::from(127)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("roce-exec-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_library_directory_links_every_name_and_is_reused() {
        let base = scratch("links");
        let (ib, cm) = (base.join("libroce_ibverbs.so"), base.join("libroce_rdmacm.so"));
        let a = LibDir::make_in(&base, &links(&ib, Some(&cm))).unwrap();
        for (name, target) in
            [("libibverbs.so", &ib), ("libibverbs.so.1", &ib), ("librdmacm.so", &cm), ("librdmacm.so.1", &cm)]
        {
            assert_eq!(std::fs::read_link(a.path.join(name)).unwrap(), *target, "{name}");
        }
        let mode = std::fs::metadata(&a.path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // The same libraries: the same directory; others: another one,
        // without librdmacm when there is none.
        assert_eq!(LibDir::make_in(&base, &links(&ib, Some(&cm))).unwrap().path, a.path);
        let b = LibDir::make_in(&base, &links(&ib, None)).unwrap();
        assert_ne!(b.path, a.path);
        assert_eq!(std::fs::read_link(b.path.join("libibverbs.so")).unwrap(), ib);
        assert!(std::fs::symlink_metadata(b.path.join("librdmacm.so")).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        let base = scratch("unsafe");
        let uid = owner_uid(Path::new("/proc/self")).unwrap();
        let top = base.join(format!("roce-exec-{uid}"));
        std::fs::create_dir(&top).unwrap();
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o777)).unwrap();
        let ib = base.join("lib.so");
        match LibDir::make_in(&base, &links(&ib, None)) {
            Err(LibDirError::Unsafe { path }) => assert_eq!(path, top),
            other => panic!("{:?}", other.map(|d| d.path)),
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
