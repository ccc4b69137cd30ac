//! The last handle of a device dropped on its own driver thread: a waker
//! the driver fires (an `async` task's, a completion channel's) may own
//! it. The device must come down there as anywhere else (no thread joins
//! itself, which std answers with a panic) and finish its pcap.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::Duration;

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::{Side, SideOptions};

/// A waker that owns a whole side (device, PD, CQ, QP, MR) and says when
/// that side has been dropped, wherever it was dropped.
struct Owner {
    side: Mutex<Option<Side>>,
    dropped: mpsc::Sender<()>,
}

impl Wake for Owner {
    fn wake(self: Arc<Self>) {}
}

impl Drop for Owner {
    fn drop(&mut self) {
        drop(self.side.lock().unwrap().take());
        // Not reached if dropping the side panicked.
        let _ = self.dropped.send(());
    }
}

#[test]
fn the_last_handle_dropped_on_the_driver_thread_tears_the_device_down() {
    let pcap = std::env::temp_dir().join(format!("roce-teardown-{}.pcapng", std::process::id()));
    let x = SideOptions::default().open();
    let y = {
        let mut cfg = DeviceConfig::new("127.0.0.1:0".parse().unwrap());
        cfg.pcap = Some(pcap.clone());
        let dev = Device::open(cfg).unwrap();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(16).unwrap();
        let qp = pd.create_qp(QpBuilder::rc(&cq).max_send_wr(4).max_recv_wr(4)).unwrap();
        let mr = pd.reg_mr(alloc_buffer(4096), Access::ALL).unwrap();
        Side { dev, pd, cq, qp, mr }
    };
    udp_pair::connect(&x, &y, &ConnectOptions::default());
    y.qp.post_recv(RecvWr { wr_id: 1, sg_list: vec![y.mr.sge(0, 64)] }).unwrap();

    // From here y's objects are reachable only through the waker its CQ
    // keeps: the driver thread that fires it drops the last handle.
    let (tx, dropped) = mpsc::channel();
    let cq = y.cq.clone();
    let waker = Waker::from(Arc::new(Owner { side: Mutex::new(Some(y)), dropped: tx }));
    assert!(!cq.arm_waker(&waker), "nothing completed yet");
    drop((waker, cq));

    x.mr.write(0, b"last words").unwrap();
    x.qp.post_send(SendWr::new(7, SendOp::Send, vec![x.mr.sge(0, 10)])).unwrap();
    dropped
        .recv_timeout(Duration::from_secs(20))
        .expect("the side owned by the waker was dropped, on the driver thread, without a panic");

    // The pcap was finished: it reads to its end, with the SEND received
    // and the ACK sent.
    let mut r = roce_wire::pcap::PcapReader::open(&pcap).expect("the pcap opens");
    let mut records = 0;
    while let Some(rec) = r.next_record() {
        rec.expect("every record reads");
        records += 1;
    }
    assert!(records >= 2, "{records} records");
    let _ = std::fs::remove_file(&pcap);
}
