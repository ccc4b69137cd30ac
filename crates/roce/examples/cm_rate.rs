//! Connections per second through RDMA CM between two devices on loopback
//! (what rdma-core's `cmtime` measures against a kernel): each round a REQ,
//! REP and RTU (the QP brought to RTS on both ends) and a DREQ/DREP.
//!
//! `cargo run --release -p roce --example cm_rate -- [N] [IP_A] [IP_B]`
//! (defaults: 200, 127.0.0.2, 127.0.0.3; each device owns UDP 4791 of its
//! address).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use roce::cm::{self, Listener};
use roce::{Device, DeviceConfig, QpBuilder};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(Ok(200), |s| s.parse())?;
    let ip_a = args.get(2).map_or("127.0.0.2", String::as_str);
    let ip_b = args.get(3).map_or("127.0.0.3", String::as_str);
    let a = Device::open(DeviceConfig::new(format!("{ip_a}:4791").parse()?))?;
    let b = Device::open(DeviceConfig::new(format!("{ip_b}:4791").parse()?))?;
    let listener = Listener::bind(&b, 7471)?;
    let addr = SocketAddr::new(b.cm_address(), 7471);
    let t = Some(Duration::from_secs(10));
    let server = std::thread::spawn(move || -> roce::Result<()> {
        let cq = b.create_cq(4)?;
        let pd = b.alloc_pd()?;
        for _ in 0..n {
            let mut c = listener.accept(pd.create_qp(QpBuilder::rc(&cq))?, t)?;
            c.wait_disconnected(t)?;
        }
        Ok(())
    });
    let cq = a.create_cq(4)?;
    let pd = a.alloc_pd()?;
    let start = Instant::now();
    let mut setup = Duration::ZERO;
    for _ in 0..n {
        let qp = pd.create_qp(QpBuilder::rc(&cq))?;
        let t0 = Instant::now();
        let mut c = cm::connect(&a, addr, qp, &[], t)?;
        setup += t0.elapsed();
        c.disconnect()?;
        c.wait_disconnected(t)?;
    }
    let all = start.elapsed();
    server.join().map_err(|_| "the server thread panicked")??;
    println!(
        "{n} connections: {:.0} connections/s (connect + disconnect), connect alone {:.1} us on average",
        n as f64 / all.as_secs_f64(),
        setup.as_secs_f64() * 1e6 / n as f64
    );
    Ok(())
}
