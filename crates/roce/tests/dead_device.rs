//! A device whose engine panicked is dead, and says so: the driver thread
//! catches the panic, every later verb fails with `Error::DeviceDead`
//! (carrying the panic's message), and every wait, blocking or `async`,
//! wakes and fails instead of sleeping until its timeout. The panic is
//! injected through a hook that only tests call.

use std::future::Future;
use std::pin::pin;
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::{SideOptions, UdpPair};

/// A waker that reports each wake on a channel.
struct Report(mpsc::SyncSender<()>);

impl Wake for Report {
    fn wake(self: Arc<Self>) {
        let _ = self.0.try_send(());
    }
}

fn is_dead<T>(r: Result<T>) -> bool {
    match r {
        Err(Error::DeviceDead(why)) => why.contains("the driver thread panicked: injected engine failure"),
        Err(e) => panic!("not a dead-device error: {e}"),
        Ok(_) => panic!("a verb succeeded on a dead device"),
    }
}

#[test]
fn an_engine_panic_kills_the_device_and_every_verb_and_wait_says_so() {
    let (x, y) = UdpPair::new(SideOptions::default()).open();
    x.mr.write(0, b"before").unwrap();
    let write = SendOp::Write { remote_addr: y.mr.addr(), rkey: y.mr.rkey() };
    x.qp.post_send(SendWr::new(9, write, vec![x.mr.sge(0, 6)])).unwrap();
    assert_eq!(udp_pair::wait_n(&x.cq, 1)[0].status, WcStatus::Success);
    assert_eq!(x.dev.dead(), None);

    // A blocking waiter and a parked async waiter on x's CQ.
    let cq = x.cq.clone();
    let blocked = std::thread::spawn(move || {
        let mut wc = [WC_ZERO; 4];
        cq.wait(&mut wc, Duration::from_secs(600))
    });
    let (tx, woken) = mpsc::sync_channel(8);
    let waker = Waker::from(Arc::new(Report(tx)));
    let mut wc = [WC_ZERO; 4];
    let mut fut = pin!(x.cq.wait_async(&mut wc));
    assert!(fut.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());

    x.dev.inject_driver_panic("injected engine failure");

    woken.recv_timeout(Duration::from_secs(20)).expect("the parked task was woken");
    match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(r) => assert!(is_dead(r)),
        Poll::Pending => panic!("a dead device's CQ is still pending"),
    }
    assert!(is_dead(blocked.join().unwrap()), "the blocked waiter failed (it did not run to its timeout)");
    let why = x.dev.dead().expect("dead");
    assert!(why.contains("injected engine failure"), "{why}");

    // Every verb fails the same way.
    let sge = x.mr.sge(0, 6);
    assert!(is_dead(x.qp.post_send(SendWr::new(1, SendOp::Send, vec![sge]))));
    assert!(is_dead(x.qp.post_recv(RecvWr { wr_id: 2, sg_list: vec![sge] })));
    assert!(is_dead(x.qp.query()));
    assert!(is_dead(x.cq.poll(&mut [WC_ZERO; 4])));
    assert!(is_dead(x.cq.wait(&mut [WC_ZERO; 4], Duration::from_secs(600))));
    assert!(is_dead(x.mr.read(0, &mut [0u8; 6])));
    assert!(is_dead(x.mr.write(0, b"after")));
    assert!(is_dead(x.mr.wait_byte(0, b'x', Duration::from_secs(600))));
    assert!(is_dead(x.dev.progress()));
    assert!(is_dead(x.dev.alloc_pd()));
    assert!(is_dead(x.dev.create_cq(4)));
    assert!(is_dead(x.pd.reg_mr(MemBuf::new(64), Access::ALL)));
    assert!(is_dead(x.pd.create_qp(QpBuilder::rc(&x.cq))));
    // Nothing will come to wake an armed waker: arming says "look now".
    assert!(x.cq.arm_waker(&waker));
    assert!(x.dev.arm_event_waker(&waker));
    assert_eq!(x.dev.poll_event(), None);
    // What was counted can still be read.
    assert!(x.dev.counters().sent_pkts > 0);
    let _ = x.dev.driver_stats();

    // The other device is unharmed.
    y.mr.write(0, b"alive").unwrap();
    let mut b = [0u8; 5];
    y.mr.read(0, &mut b).unwrap();
    assert_eq!(&b, b"alive");
    assert_eq!(y.dev.dead(), None);
    // Both come down without a panic or a hang.
    drop((x, y));
}
