//! Which devices the library offers, without sysfs: from the environment
//! or a small file.
//!
//! * `ROCE_DEVICES="roce0=127.0.0.1,roce1=[fd00::2]:4792"`: a comma-separated
//!   list of `NAME=ADDRESS[:PORT]` (IPv6 addresses in brackets when a port
//!   follows); the port defaults to RoCEv2's 4791.
//! * otherwise `ROCE_CONFIG=FILE`, or `/etc/roce/devices.conf` if it
//!   exists: one device a line, `NAME ADDRESS [PORT]`, `#` starts a comment.
//!
//! The address is the device's GID; the UDP socket binds it.

use std::net::{IpAddr, SocketAddr};

/// RoCEv2's UDP port.
pub const ROCE_PORT: u16 = 4791;
/// The file read when neither variable is set.
pub const DEFAULT_CONFIG: &str = "/etc/roce/devices.conf";

/// One configured device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEntry {
    pub name: String,
    pub addr: SocketAddr,
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() >= 64
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!("device name {name:?}: 1 to 63 letters, digits, '-' or '_'"));
    }
    Ok(())
}

fn parse_addr(s: &str, port: Option<u16>) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        if port.is_some() {
            return Err(format!("{s}: the port is given twice"));
        }
        return Ok(a);
    }
    let ip = s.trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = ip.parse().map_err(|_| format!("{s:?} is not an IP address"))?;
    if ip.is_unspecified() {
        return Err(format!("{s}: a device needs a specific address (it is the GID)"));
    }
    Ok(SocketAddr::new(ip, port.unwrap_or(ROCE_PORT)))
}

/// Parses `ROCE_DEVICES`' value.
pub fn parse_list(s: &str) -> Result<Vec<DeviceEntry>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, addr) =
            item.split_once('=').ok_or_else(|| format!("{item:?}: expected NAME=ADDRESS[:PORT]"))?;
        check_name(name.trim())?;
        out.push(DeviceEntry { name: name.trim().to_string(), addr: parse_addr(addr.trim(), None)? });
    }
    unique(out)
}

/// Parses a configuration file's text.
pub fn parse_file(text: &str) -> Result<Vec<DeviceEntry>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = match f.len() {
            2 => None,
            3 => Some(f[2].parse::<u16>().map_err(|_| format!("line {}: bad port {:?}", n + 1, f[2]))?),
            _ => return Err(format!("line {}: expected NAME ADDRESS [PORT]", n + 1)),
        };
        check_name(f[0]).map_err(|e| format!("line {}: {e}", n + 1))?;
        let addr = parse_addr(f[1], port).map_err(|e| format!("line {}: {e}", n + 1))?;
        out.push(DeviceEntry { name: f[0].to_string(), addr });
    }
    unique(out)
}

fn unique(v: Vec<DeviceEntry>) -> Result<Vec<DeviceEntry>, String> {
    for (i, d) in v.iter().enumerate() {
        if v[..i].iter().any(|e| e.name == d.name) {
            return Err(format!("device {} is configured twice", d.name));
        }
    }
    Ok(v)
}

/// The devices configured for this process (see the module's docs); an
/// error says what is wrong with the configuration.
pub fn from_env() -> Result<Vec<DeviceEntry>, String> {
    if let Ok(list) = std::env::var("ROCE_DEVICES") {
        return parse_list(&list).map_err(|e| format!("ROCE_DEVICES: {e}"));
    }
    let (path, required) = match std::env::var("ROCE_CONFIG") {
        Ok(p) => (p, true),
        Err(_) => (DEFAULT_CONFIG.to_string(), false),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_file(&text).map_err(|e| format!("{path}: {e}")),
        Err(e) if required || e.kind() != std::io::ErrorKind::NotFound => Err(format!("{path}: {e}")),
        Err(_) => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_files() {
        let v = parse_list("roce0=127.0.0.1, roce1=[::1]:4792,r2=10.0.0.3:1000").unwrap();
        assert_eq!(v[0].addr, "127.0.0.1:4791".parse().unwrap());
        assert_eq!(v[1].addr, "[::1]:4792".parse().unwrap());
        assert_eq!(v[2].addr, "10.0.0.3:1000".parse().unwrap());
        let f = parse_file("# devices\nroce0 127.0.0.2\nroce1 fd00::1 4800 # v6\n").unwrap();
        assert_eq!(f[0], DeviceEntry { name: "roce0".into(), addr: "127.0.0.2:4791".parse().unwrap() });
        assert_eq!(f[1].addr, "[fd00::1]:4800".parse().unwrap());
        for bad in ["roce0", "roce0=0.0.0.0", "=1.2.3.4", "a=1.2.3.4,a=1.2.3.5", "a b=1.2.3.4", "x=nohost"] {
            assert!(parse_list(bad).is_err(), "{bad}");
        }
        assert!(parse_file("roce0 1.2.3.4 99999").is_err());
        assert!(parse_file("roce0 1.2.3.4:5 6").is_err());
    }
}
