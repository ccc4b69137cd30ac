//! `Cq::wait_async` on a tokio runtime: completions wake the waiting task
//! (driver thread and busy-poll modes), several tasks wait on several CQs at
//! once; and, polling the future by hand so that it is known to be parked,
//! the driver thread and a modify to ERR each wake it.

use std::time::Duration;

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::{Side, SideOptions, UdpPair};

/// `x` busy-polls if asked; `y`, which only answers, keeps its driver
/// thread (a busy-poll device moves only while its application polls).
fn pair(busy: bool) -> (Side, Side) {
    UdpPair::new(SideOptions::default().busy_poll(busy))
        .y(SideOptions::default())
        .mtu(PathMtu::Mtu1024)
        .open()
}

/// Awaits `n` completions, failing after 10 s instead of hanging.
async fn completions(cq: &Cq, n: usize) -> Vec<Wc> {
    let mut all = Vec::new();
    let mut buf = [WC_ZERO; 16];
    while all.len() < n {
        let k = tokio::time::timeout(Duration::from_secs(10), cq.wait_async(&mut buf))
            .await
            .expect("a completion within 10 s")
            .unwrap();
        assert!(k > 0);
        all.extend_from_slice(&buf[..k]);
    }
    all
}

/// 200 signalled 5000-byte WRITEs, awaited one batch of completions at a time;
/// every byte lands. In busy-poll mode the awaiting task is what drives `x`.
async fn writes(busy: bool) {
    let (x, y) = pair(busy);
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    x.mr.write(0, &data[..1 << 20]).unwrap();
    let mut done = 0;
    let mut posted = 0u64;
    while done < 200 {
        while posted < 200 && posted - done < 64 {
            let off = posted * 5000;
            let wr = SendWr::new(
                posted,
                SendOp::Write { remote_addr: y.mr.addr() + off, rkey: y.mr.rkey() },
                vec![x.mr.sge(off, 5000)],
            );
            x.qp.post_send(wr).unwrap();
            posted += 1;
        }
        for wc in completions(&x.cq, 1).await {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(wc.wr_id, done, "completions in order");
            done += 1;
        }
    }
    let mut got = vec![0u8; 1_000_000];
    y.mr.read(0, &mut got).unwrap();
    assert_eq!(got[..], data[..1_000_000]);
}

#[tokio::test(flavor = "current_thread")]
async fn writes_complete_driver_thread() {
    writes(false).await;
}

#[tokio::test(flavor = "current_thread")]
async fn writes_complete_busy_poll() {
    writes(true).await;
}

/// A task waits for a receive on one CQ while another posts the SEND and
/// waits for its own completion: both wake, on a multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tasks_two_cqs() {
    let (x, y) = pair(false);
    let (x, y) = (std::sync::Arc::new(x), std::sync::Arc::new(y));
    y.qp.post_recv(RecvWr { wr_id: 9, sg_list: vec![y.mr.sge(0, 4096)] }).unwrap();
    let yy = y.clone();
    let receiver = tokio::spawn(async move { completions(&yy.cq, 1).await });
    // Let the receiver reach its await first (it may or may not have).
    tokio::task::yield_now().await;
    x.mr.write(100, b"hello, async").unwrap();
    x.qp.post_send(SendWr::new(1, SendOp::Send, vec![x.mr.sge(100, 12)])).unwrap();
    let sent = completions(&x.cq, 1).await;
    assert_eq!((sent[0].wr_id, sent[0].status), (1, WcStatus::Success));
    let got = receiver.await.unwrap();
    assert_eq!((got[0].wr_id, got[0].status, got[0].byte_len), (9, WcStatus::Success, 12));
    let mut buf = [0u8; 12];
    y.mr.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello, async");
}

/// A waker that reports each wake on a channel.
struct ChannelWaker(std::sync::Mutex<std::sync::mpsc::Sender<()>>);

impl std::task::Wake for ChannelWaker {
    fn wake(self: std::sync::Arc<Self>) {
        let _ = self.0.lock().unwrap().send(());
    }
}

fn channel_waker() -> (std::task::Waker, std::sync::mpsc::Receiver<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    (std::sync::Arc::new(ChannelWaker(std::sync::Mutex::new(tx))).into(), rx)
}

/// Polled by hand, so that the future is known to be parked: a SEND from
/// the peer makes the driver thread wake it, and the next poll has the
/// receive.
#[test]
fn the_driver_thread_wakes_a_parked_future() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let (x, y) = pair(false);
    y.qp.post_recv(RecvWr { wr_id: 9, sg_list: vec![y.mr.sge(0, 64)] }).unwrap();
    let (waker, woken) = channel_waker();
    let mut cx = Context::from_waker(&waker);
    let mut buf = [WC_ZERO; 4];
    let mut fut = Box::pin(y.cq.wait_async(&mut buf));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    assert!(woken.try_recv().is_err(), "woken with nothing to complete");
    x.qp.post_send(SendWr::new(1, SendOp::Send, vec![x.mr.sge(0, 16)])).unwrap();
    woken.recv_timeout(Duration::from_secs(10)).expect("woken within 10 s");
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(1)) => {}
        other => panic!("{other:?}"),
    }
    drop(fut);
    assert_eq!((buf[0].wr_id, buf[0].status, buf[0].byte_len), (9, WcStatus::Success, 16));
}

/// Moving a QP to ERR flushes its receive queue: the parked future is woken
/// by the verb itself, although no packet arrived.
#[test]
fn modify_to_err_wakes_a_parked_future() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let (_x, y) = pair(false);
    y.qp.post_recv(RecvWr { wr_id: 5, sg_list: vec![y.mr.sge(0, 64)] }).unwrap();
    let (waker, woken) = channel_waker();
    let mut cx = Context::from_waker(&waker);
    let mut buf = [WC_ZERO; 4];
    let mut fut = Box::pin(y.cq.wait_async(&mut buf));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    let attr = QpAttr { qp_state: QpState::Err, ..QpAttr::default() };
    y.qp.modify(&attr, AttrMask::STATE).unwrap();
    woken.try_recv().expect("woken by the modify itself");
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(1)) => {}
        other => panic!("{other:?}"),
    }
    drop(fut);
    assert_eq!((buf[0].wr_id, buf[0].status), (5, WcStatus::WrFlushErr));
}

#[tokio::test(flavor = "current_thread")]
async fn empty_buffer_is_ready_at_once() {
    let s = SideOptions::default().open();
    assert_eq!(s.cq.wait_async(&mut []).await.unwrap(), 0);
}
