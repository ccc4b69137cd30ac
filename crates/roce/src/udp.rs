//! Batched UDP I/O with the per-packet metadata RoCEv2 needs: `sendmmsg` and
//! `recvmmsg`, the IP TOS / IPv6 traffic class of every packet in both
//! directions (DSCP + ECN: ECT(0) out, CE in), the destination address, TTL
//! and IPv6 flow label of received packets, UDP GSO (`UDP_SEGMENT`) and GRO
//! (`UDP_GRO`) where the kernel has them.
//!
//! What the socket is set up for, because the ICRC covers the IP header:
//!
//! * IPv4 packets leave with DF set (`IP_PMTUDISC_DO`), so an unconnected
//!   socket sends IP Identification 0 (Linux `ip_select_ident_segs`), and
//!   the segments of a GSO send carry 0, 1, 2, ... (`inet_gso_segment`
//!   counts up from the first). The driver fixes each segment's ICRC for
//!   its ID.
//! * TTL / hop limit 64 and, over IPv6, no automatic flow label
//!   (`IPV6_AUTOFLOWLABEL` off): fields the ICRC masks, fixed so that a
//!   capture written by the driver shows them as they leave.
//! * IPv6 accepts datagrams with a zero UDP checksum (`UDP_NO_CHECK6_RX`):
//!   Linux Soft-RoCE and RoCE NICs send them (RFC 6935/6936 allow it for
//!   tunnels; the ICRC protects the packet). Without it the kernel drops
//!   them as checksum errors before we see them.
//!
//! And what it is set up for because the kernel drops silently: the socket
//! buffers are asked for with `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` where the
//! process may (CAP_NET_ADMIN), else with `SO_RCVBUF`/`SO_SNDBUF`, which
//! Linux caps at `net.core.rmem_max`/`wmem_max` without a word, and read
//! back ([`SocketBuffers`]); `SO_RXQ_OVFL` has every received datagram
//! carry the socket's count of datagrams dropped for want of room, and
//! `SO_MEMINFO` reads it when nothing arrives.
//!
//! # Safety argument
//!
//! This module is the crate's `unsafe` but for one `madvise` (`buffer`):
//! memory handed to the kernel in `sendmmsg`/`recvmmsg`. Every `msghdr`
//! points at buffers that live in the socket's `Scratch` (allocated once,
//! never resized while headers point into them, borrowed mutably for the
//! whole call) or in the caller's slices (`iovec`, `sockaddr_storage`,
//! control buffers), with lengths taken from those same buffers; the kernel
//! writes at most `msg_namelen`,
//! `msg_controllen` and `iov_len` bytes into them. Control messages are
//! built and read only through the `CMSG_*` macros of libc over buffers
//! aligned for `cmsghdr` (a `u64` array) and sized with `CMSG_SPACE`. The
//! returned address is decoded from a `sockaddr_storage` according to its
//! `ss_family` and the length the kernel reported. A message sent in
//! pieces ([`TxPiece`]) may also point at payload in registered memory,
//! which the kernel only reads: each `PayloadRef` keeps its buffer alive for
//! the call and its range inside it (its safety argument, `roce_proto::mem`,
//! covers that no one writes those bytes meanwhile).

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};

/// Messages per `sendmmsg`/`recvmmsg` call.
pub const BATCH: usize = 32;
/// Largest UDP payload we receive in one buffer (GRO may coalesce up to this).
pub const RX_BUF: usize = 65536;

const SOL_UDP: libc::c_int = 17;
const UDP_NO_CHECK6_RX: libc::c_int = 102;
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;
/// Linux `IPV6_AUTOFLOWLABEL` (include/uapi/linux/in6.h).
const IPV6_AUTOFLOWLABEL: libc::c_int = 70;
/// TTL / hop limit of every packet sent.
pub const TTL: u8 = 64;
/// Room for TOS/TCLASS + pktinfo + GRO segment size + TTL + flow info +
/// drop count (received: 16 + 40 + 16 + 16 + 16 + 16 bytes) or TOS +
/// segment size (sent).
const CMSG_BUF_WORDS: usize = 24;
/// Linux `SK_MEMINFO_DROPS`: the drop count's index in `SO_MEMINFO`'s array
/// (include/uapi/linux/sock_diag.h).
const SK_MEMINFO_DROPS: usize = 8;
/// Linux `SK_MEMINFO_VARS` as of 4.x (newer kernels may report more; the
/// call reads the first this many).
const SK_MEMINFO_VARS: usize = 9;

/// The receive buffer asked for by default: 32 MiB, room for a 16 MiB RDMA
/// READ's responses and the windows of a few QPs besides. With 8 MiB
/// asked and `rmem_max` at 4 MiB, READ bursts of 8 MiB lost their tail;
/// 32 MiB took such runs clean. Forced where the process may, else capped
/// by `net.core.rmem_max` (the device then warns if that is too little).
pub const DEFAULT_RECV_BUFFER: usize = 32 << 20;
/// The send buffer asked for by default.
pub const DEFAULT_SEND_BUFFER: usize = 8 << 20;

/// Socket buffer sizes to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferRequest {
    /// Bytes of receive buffer (`SO_RCVBUF`).
    pub recv: usize,
    /// Bytes of send buffer (`SO_SNDBUF`).
    pub send: usize,
    /// Try `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` first (they pass the
    /// `net.core` caps but need CAP_NET_ADMIN; without it the plain
    /// options are used).
    pub force: bool,
}

impl Default for BufferRequest {
    /// The default sizes, forced where the process may.
    fn default() -> Self {
        BufferRequest { recv: DEFAULT_RECV_BUFFER, send: DEFAULT_SEND_BUFFER, force: true }
    }
}

/// The socket buffers asked for and what the kernel granted, read back
/// after setting them.
///
/// A granted size is what `getsockopt` reports: the kernel's limit on the
/// bytes it holds for the socket, its bookkeeping (each datagram's
/// `sk_buff`) included. Linux doubles the size set for that bookkeeping
/// (socket(7)), after capping it at `net.core.rmem_max`/`wmem_max` unless
/// the size was forced; so a granted size below twice the request means
/// the cap cut it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketBuffers {
    pub recv_requested: usize,
    pub recv_granted: usize,
    /// `SO_RCVBUFFORCE` was allowed (the `rmem_max` cap did not apply).
    pub recv_forced: bool,
    pub send_requested: usize,
    pub send_granted: usize,
    /// `SO_SNDBUFFORCE` was allowed.
    pub send_forced: bool,
}

impl SocketBuffers {
    /// Bytes of datagram payload the receive buffer has room for: half of
    /// what was granted, the other half being the kernel's bookkeeping
    /// (the share socket(7) gives it).
    pub fn recv_room(&self) -> usize {
        self.recv_granted / 2
    }
}

/// One datagram (or GSO batch of equal-size datagrams) to send.
#[derive(Debug, Clone, Copy)]
pub struct TxMsg<'a> {
    pub dst: SocketAddr,
    /// TOS / traffic class byte: DSCP << 2 | ECN.
    pub tos: u8,
    /// The bytes to send, unless `pieces` holds any.
    pub data: &'a [u8],
    /// The bytes to send, in pieces (one `iovec` each): the engine's
    /// headers and trailers, and payload left in registered memory. Used
    /// instead of `data` when not empty.
    pub pieces: &'a [TxPiece<'a>],
    /// GSO: `data` holds datagrams of this size (the last may be shorter).
    pub segment: Option<u16>,
}

/// A piece of a message to send.
#[derive(Clone, Copy, Debug)]
pub enum TxPiece<'a> {
    Bytes(&'a [u8]),
    /// Payload bytes left in registered memory
    /// (`Engine::poll_transmit_batch_refs`), read by the kernel in place.
    Mem(&'a roce_proto::PayloadRef),
}

impl TxPiece<'_> {
    pub fn len(&self) -> usize {
        match self {
            TxPiece::Bytes(b) => b.len(),
            TxPiece::Mem(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn iovec(&self) -> libc::iovec {
        let (base, len) = match self {
            TxPiece::Bytes(b) => (b.as_ptr(), b.len()),
            TxPiece::Mem(m) => (m.as_ptr(), m.len()),
        };
        libc::iovec { iov_base: base as *mut _, iov_len: len }
    }
}

/// Linux `UIO_MAXIOV`: the most iovecs one message may have.
pub const MAX_PIECES: usize = 1024;

/// What came with a received buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    pub src: SocketAddr,
    /// Local address the packet was sent to (from IP_PKTINFO).
    pub dst_ip: Option<IpAddr>,
    /// TOS / traffic class byte (ECN in the low 2 bits).
    pub tos: u8,
    /// TTL / hop limit (0 if the kernel did not say).
    pub ttl: u8,
    /// IPv6 flow label (0 for IPv4, or if the kernel did not say).
    pub flow_label: u32,
    /// Bytes in the buffer.
    pub len: usize,
    /// GRO: the buffer holds datagrams of this size (the last may be shorter);
    /// equal to `len` without GRO.
    pub stride: usize,
}

impl Default for RxMeta {
    fn default() -> RxMeta {
        RxMeta {
            src: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            dst_ip: None,
            tos: 0,
            ttl: 0,
            flow_label: 0,
            len: 0,
            stride: 0,
        }
    }
}

/// The message headers, addresses and control buffers of one batch, kept
/// from call to call so a call initialises only the entries it uses (the
/// latency path sends and polls one datagram at a time).
struct Scratch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    /// The iovecs of messages sent in pieces, all messages' end to end.
    gather: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    ctrl: Vec<[u64; CMSG_BUF_WORDS]>,
}

// SAFETY: the raw pointers inside the headers are written at the start of
// each call and only used during it; between calls they are dead values.
unsafe impl Send for Scratch {}

impl Scratch {
    fn new() -> Scratch {
        // SAFETY: all-zero is a valid value for these plain C structs.
        unsafe {
            Scratch {
                hdrs: vec![zeroed(); BATCH],
                iovs: vec![zeroed(); BATCH],
                gather: Vec::new(),
                names: vec![zeroed(); BATCH],
                ctrl: vec![[0u64; CMSG_BUF_WORDS]; BATCH],
            }
        }
    }
}

/// A non-blocking UDP socket with batched, metadata-carrying I/O.
pub struct UdpIo {
    scratch: Scratch,
    sock: Socket,
    v6: bool,
    gso: bool,
    gro: bool,
    local: SocketAddr,
    buffers: SocketBuffers,
    /// The kernel's count of datagrams dropped at this socket, as last
    /// reported (it is a wrapping `u32`), and their total since binding.
    drops_seen: u32,
    drops: u64,
    /// Tests: fail segmented sends with this errno, as a kernel whose route
    /// device cannot checksum does (EIO).
    #[cfg(test)]
    pub(crate) fail_gso: Option<i32>,
    /// Tests: fail the next receive call with this errno.
    #[cfg(test)]
    pub(crate) fail_recv: Option<i32>,
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: passes a pointer to a live c_int and its size; the kernel
    // writes at most `len` bytes and says how many.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut libc::c_int).cast(), &mut len) };
    if r == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets one socket buffer (`force`: with `force_name` first, where the
/// process may) and reads back what the kernel granted. Returns the size
/// granted and whether the forced option was allowed.
fn set_buffer(
    fd: RawFd,
    name: libc::c_int,
    force_name: libc::c_int,
    bytes: usize,
    force: bool,
) -> io::Result<(usize, bool)> {
    // The kernel takes an int and doubles it.
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX).min(libc::c_int::MAX / 2);
    let forced = force && setsockopt_int(fd, libc::SOL_SOCKET, force_name, v).is_ok();
    if !forced {
        // Refused only for a bad value; the read-back says what is in force.
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, name, v);
    }
    let granted = getsockopt_int(fd, libc::SOL_SOCKET, name)?;
    Ok((usize::try_from(granted).unwrap_or(0), forced))
}

impl UdpIo {
    /// Binds a UDP socket to `addr` and enables the options above, with the
    /// default socket buffers. GSO and GRO are used only if the kernel
    /// accepts them.
    pub fn bind(addr: SocketAddr) -> io::Result<UdpIo> {
        UdpIo::bind_with(addr, BufferRequest::default())
    }

    /// [`UdpIo::bind`] with the socket buffers asked for in `req`.
    pub fn bind_with(addr: SocketAddr, req: BufferRequest) -> io::Result<UdpIo> {
        let v6 = addr.is_ipv6();
        let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if v6 {
            sock.set_only_v6(true)?;
        }
        sock.bind(&addr.into())?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        let (recv_granted, recv_forced) =
            set_buffer(fd, libc::SO_RCVBUF, libc::SO_RCVBUFFORCE, req.recv, req.force)?;
        let (send_granted, send_forced) =
            set_buffer(fd, libc::SO_SNDBUF, libc::SO_SNDBUFFORCE, req.send, req.force)?;
        let buffers = SocketBuffers {
            recv_requested: req.recv,
            recv_granted,
            recv_forced,
            send_requested: req.send,
            send_granted,
            send_forced,
        };
        // Since Linux 2.6.33; without it drops are read with SO_MEMINFO.
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1);
        let ttl = libc::c_int::from(TTL);
        if v6 {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)?;
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_DO)?;
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, ttl)?;
            setsockopt_int(fd, SOL_UDP, UDP_NO_CHECK6_RX, 1)?;
            // Both exist since Linux 4.x; without them a capture cannot
            // know the flow label (the ICRC masks it, so the wire is fine).
            let _ = setsockopt_int(fd, libc::IPPROTO_IPV6, IPV6_AUTOFLOWLABEL, 0);
            let _ = setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO, 1);
        } else {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TTL, ttl)?;
        }
        let gro = setsockopt_int(fd, SOL_UDP, UDP_GRO, 1).is_ok();
        // Probing UDP_SEGMENT with a harmless value tells whether GSO exists;
        // the per-send control message sets the real size.
        let gso = setsockopt_int(fd, SOL_UDP, UDP_SEGMENT, 1500).is_ok()
            && setsockopt_int(fd, SOL_UDP, UDP_SEGMENT, 0).is_ok();
        let local = sock.local_addr()?.as_socket().ok_or_else(|| io::Error::other("not an IP socket"))?;
        Ok(UdpIo {
            scratch: Scratch::new(),
            sock,
            v6,
            gso,
            gro,
            local,
            buffers,
            drops_seen: 0,
            drops: 0,
            #[cfg(test)]
            fail_gso: None,
            #[cfg(test)]
            fail_recv: None,
        })
    }

    /// The socket buffers asked for and granted.
    pub fn buffers(&self) -> SocketBuffers {
        self.buffers
    }

    /// Datagrams the kernel dropped at this socket since it was bound
    /// (its receive buffer was full, or, rarely, a checksum failed), as
    /// last reported by a received datagram (`SO_RXQ_OVFL`).
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// [`UdpIo::drops`], asking the kernel now (`SO_MEMINFO`), for drops
    /// that no datagram has reported yet (the tail of a burst).
    pub fn drops_now(&mut self) -> u64 {
        let mut info = [0u32; SK_MEMINFO_VARS];
        let mut len = size_of::<[u32; SK_MEMINFO_VARS]>() as libc::socklen_t;
        // SAFETY: passes the array and its size; the kernel writes at most
        // `len` bytes (it copies min(len, its own size)) and says how many.
        let r = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 && len as usize >= (SK_MEMINFO_DROPS + 1) * size_of::<u32>() {
            self.note_drops(info[SK_MEMINFO_DROPS]);
        }
        self.drops
    }

    /// Takes the kernel's wrapping drop count `now`.
    fn note_drops(&mut self, now: u32) {
        self.drops += u64::from(now.wrapping_sub(self.drops_seen));
        self.drops_seen = now;
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
    pub fn gso(&self) -> bool {
        self.gso
    }
    /// Stops using GSO (the kernel refused a segmented send).
    pub fn disable_gso(&mut self) {
        self.gso = false;
    }
    pub fn is_ipv6(&self) -> bool {
        self.v6
    }
    pub fn gro(&self) -> bool {
        self.gro
    }
    pub fn raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Sends up to `BATCH` messages with one `sendmmsg`. Returns how many
    /// were taken by the kernel (0 when the socket buffer is full).
    pub fn send(&mut self, msgs: &[TxMsg<'_>]) -> io::Result<usize> {
        #[allow(unused_mut)]
        let mut n = msgs.len().min(BATCH);
        #[cfg(test)]
        if let Some(errno) = self.fail_gso {
            // sendmmsg's way: the messages before the failing one are sent,
            // the failing one reports its error when it comes first.
            match msgs[..n].iter().position(|m| m.segment.is_some() && self.gso) {
                Some(0) => return Err(io::Error::from_raw_os_error(errno)),
                Some(j) => n = j,
                None => {}
            }
        }
        if n == 0 {
            return Ok(0);
        }
        if let Some(m) = msgs[..n].iter().find(|m| m.pieces.len() > MAX_PIECES) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a message of {} pieces (the kernel takes {MAX_PIECES})", m.pieces.len()),
            ));
        }
        let Scratch { hdrs, iovs, gather, names, ctrl } = &mut self.scratch;
        // Every message's pieces first: `gather` must not grow once
        // headers point into it.
        gather.clear();
        if msgs[..n].iter().any(|m| !m.pieces.is_empty()) {
            gather.extend(msgs[..n].iter().flat_map(|m| m.pieces.iter().map(TxPiece::iovec)));
        }
        let mut next_piece = 0;
        for i in 0..n {
            let m = &msgs[i];
            ctrl[i] = [0u64; CMSG_BUF_WORDS];
            iovs[i] = libc::iovec { iov_base: m.data.as_ptr() as *mut _, iov_len: m.data.len() };
            let namelen = write_sockaddr(&mut names[i], m.dst);
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = namelen;
            if m.pieces.is_empty() {
                h.msg_iov = &mut iovs[i];
                h.msg_iovlen = 1;
            } else {
                h.msg_iov = gather[next_piece..].as_mut_ptr();
                h.msg_iovlen = m.pieces.len() as _;
                next_piece += m.pieces.len();
            }
            h.msg_control = ctrl[i].as_mut_ptr().cast();
            h.msg_controllen = size_of::<[u64; CMSG_BUF_WORDS]>() as _;
            // SAFETY: msg_control/msg_controllen describe ctrl[i], aligned
            // for cmsghdr; CMSG_NXTHDR stays within it (checked by libc).
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(h);
                let mut used = 0usize;
                let (level, ty) = if self.v6 {
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                } else {
                    (libc::IPPROTO_IP, libc::IP_TOS)
                };
                (*c).cmsg_level = level;
                (*c).cmsg_type = ty;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), libc::c_int::from(m.tos));
                used += libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize;
                if let (Some(seg), true) = (m.segment, self.gso) {
                    c = libc::CMSG_NXTHDR(h, c);
                    (*c).cmsg_level = SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                    used += libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
                }
                h.msg_controllen = used as _;
            }
        }
        // SAFETY: hdrs[..n] are fully initialised and every pointer in them
        // refers to memory alive until this call returns: the caller's
        // slices, and payload left in registered memory, which each
        // `PayloadRef` keeps alive and bounds (see `roce_proto::mem`).
        let r = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), hdrs.as_mut_ptr(), n as u32, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(r as usize)
    }

    /// Receives up to `bufs.len()` (at most `BATCH`) buffers with one
    /// `recvmmsg`. Returns how many were filled (0 when nothing is waiting).
    pub fn recv(&mut self, bufs: &mut [Vec<u8>], metas: &mut [RxMeta]) -> io::Result<usize> {
        let n = bufs.len().min(metas.len()).min(BATCH);
        if n == 0 {
            return Ok(0);
        }
        #[cfg(test)]
        if let Some(errno) = self.fail_recv.take() {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let Scratch { hdrs, iovs, names, ctrl, .. } = &mut self.scratch;
        for i in 0..n {
            iovs[i] = libc::iovec { iov_base: bufs[i].as_mut_ptr().cast(), iov_len: bufs[i].len() };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as _;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = ctrl[i].as_mut_ptr().cast();
            h.msg_controllen = size_of::<[u64; CMSG_BUF_WORDS]>() as _;
        }
        // SAFETY: as in `send`; the kernel writes within the described buffers.
        let r = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(e);
        }
        let got = r as usize;
        let mut drops = None;
        for i in 0..got {
            let h = &hdrs[i].msg_hdr;
            let len = hdrs[i].msg_len as usize;
            // SAFETY: the kernel filled names[i] up to msg_namelen.
            let src = unsafe { read_sockaddr(&names[i], h.msg_namelen) }
                .unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)));
            let mut meta = RxMeta { src, dst_ip: None, tos: 0, ttl: 0, flow_label: 0, len, stride: len };
            // SAFETY: walking the control buffer the kernel filled, with the
            // length it reported, through libc's CMSG macros.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(h);
                while !c.is_null() {
                    let data = libc::CMSG_DATA(c);
                    match ((*c).cmsg_level, (*c).cmsg_type) {
                        (libc::IPPROTO_IP, libc::IP_TOS) => meta.tos = std::ptr::read_unaligned(data),
                        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                            meta.tos = std::ptr::read_unaligned(data.cast::<libc::c_int>()) as u8
                        }
                        (libc::IPPROTO_IP, libc::IP_TTL) => {
                            meta.ttl = std::ptr::read_unaligned(data.cast::<libc::c_int>()) as u8
                        }
                        (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT) => {
                            meta.ttl = std::ptr::read_unaligned(data.cast::<libc::c_int>()) as u8
                        }
                        (libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO) => {
                            let fi = u32::from_be(std::ptr::read_unaligned(data.cast::<u32>()));
                            meta.flow_label = fi & 0x000f_ffff;
                        }
                        (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                            let pi: libc::in_pktinfo = std::ptr::read_unaligned(data.cast());
                            meta.dst_ip = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(pi.ipi_addr.s_addr))));
                        }
                        (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                            let pi: libc::in6_pktinfo = std::ptr::read_unaligned(data.cast());
                            meta.dst_ip = Some(IpAddr::V6(Ipv6Addr::from(pi.ipi6_addr.s6_addr)));
                        }
                        (SOL_UDP, UDP_GRO) => {
                            let seg = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                            if seg > 0 {
                                meta.stride = seg as usize;
                            }
                        }
                        (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => {
                            drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                        }
                        _ => {}
                    }
                    c = libc::CMSG_NXTHDR(h, c);
                }
            }
            metas[i] = meta;
        }
        if let Some(d) = drops {
            self.note_drops(d);
        }
        Ok(got)
    }
}

fn write_sockaddr(s: &mut libc::sockaddr_storage, a: SocketAddr) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr = libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let sin6 = unsafe { &mut *(s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr = libc::in6_addr { s6_addr: v6.ip().octets() };
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_scope_id = v6.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// # Safety
/// `s` must have been written by the kernel with `len` valid bytes.
unsafe fn read_sockaddr(s: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            let sin = &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>();
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            let sin6 = &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux Soft-RoCE sends RoCEv2 over IPv6 with UDP checksum 0, which a
    /// plain UDP socket discards (Udp6InCsumErrors). Ours takes it. Needs a
    /// raw socket to send such a datagram (root); skips without one.
    #[test]
    fn ipv6_datagrams_with_zero_checksum_arrive() {
        let raw = match Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::UDP)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("no raw IPv6 socket ({e}): cannot send a zero-checksum datagram, skipping");
                return;
            }
        };
        let mut ours = UdpIo::bind("[::1]:0".parse().unwrap()).unwrap();
        let plain = std::net::UdpSocket::bind("[::1]:0").unwrap();
        plain.set_nonblocking(true).unwrap();
        let payload = b"BTH and the rest";
        for port in [ours.local_addr().port(), plain.local_addr().unwrap().port()] {
            let mut d = Vec::new();
            d.extend_from_slice(&4791u16.to_be_bytes());
            d.extend_from_slice(&port.to_be_bytes());
            d.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            d.extend_from_slice(&[0, 0]);
            d.extend_from_slice(payload);
            let to: SocketAddr = "[::1]:0".parse().unwrap();
            raw.send_to(&d, &to.into()).unwrap();
        }
        let mut bufs = vec![vec![0u8; RX_BUF]; 1];
        let mut metas = [RxMeta::default(); 1];
        let mut got = 0;
        let t = std::time::Instant::now();
        while got == 0 && t.elapsed() < std::time::Duration::from_secs(2) {
            got = ours.recv(&mut bufs, &mut metas).unwrap();
            std::thread::yield_now();
        }
        assert_eq!(got, 1, "the zero-checksum datagram did not arrive");
        assert_eq!(&bufs[0][..metas[0].len], payload);
        assert_eq!(metas[0].src.port(), 4791);
        // The same datagram to a socket without UDP_NO_CHECK6_RX is dropped
        // (the test really sent checksum 0): the first thing that socket
        // gets is a marker sent after it.
        let sender = std::net::UdpSocket::bind("[::1]:0").unwrap();
        sender.send_to(b"marker", plain.local_addr().unwrap()).unwrap();
        let mut b = [0u8; 64];
        let t = std::time::Instant::now();
        let n = loop {
            match plain.recv(&mut b) {
                Ok(n) => break n,
                Err(_) if t.elapsed() < std::time::Duration::from_secs(2) => std::thread::yield_now(),
                Err(e) => panic!("the marker did not arrive: {e}"),
            }
        };
        assert_eq!(&b[..n], b"marker", "a plain socket took a zero-checksum IPv6 datagram");
    }

    /// Messages in pieces: the kernel joins the pieces, whatever their
    /// boundaries against the GSO segments, and each message's own pieces
    /// go to it (a message of whole bytes between two in pieces). Too many
    /// pieces for one message are refused before anything is sent.
    #[test]
    fn messages_in_pieces_arrive_joined() {
        let mut a = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut b = UdpIo::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let p = &payload;
        let first = [TxPiece::Bytes(&p[..10]), TxPiece::Bytes(&p[10..1500]), TxPiece::Bytes(&p[1500..3000])];
        let last = [TxPiece::Bytes(&p[2000..2001]), TxPiece::Bytes(&p[2001..2300])];
        let to = b.local_addr();
        let gso = a.gso().then_some(1000);
        let msgs = [
            TxMsg { dst: to, tos: 0, data: &[], pieces: &first, segment: gso },
            TxMsg { dst: to, tos: 0, data: &p[..50], pieces: &[], segment: None },
            TxMsg { dst: to, tos: 0, data: &p[..1], pieces: &last, segment: None },
        ];
        let gso = gso.is_some();
        if gso {
            assert_eq!(a.send(&msgs).unwrap(), 3);
        } else {
            assert_eq!(a.send(&msgs[1..]).unwrap(), 2);
        }
        let mut bufs = vec![vec![0u8; RX_BUF]; 8];
        let mut metas = [RxMeta::default(); 8];
        let mut got = Vec::new();
        let want = if gso { 5 } else { 2 };
        let t = std::time::Instant::now();
        while got.len() < want && t.elapsed() < std::time::Duration::from_secs(2) {
            let n = b.recv(&mut bufs, &mut metas).unwrap();
            for i in 0..n {
                got.extend(bufs[i][..metas[i].len].chunks(metas[i].stride.max(1)).map(<[u8]>::to_vec));
            }
            std::thread::yield_now();
        }
        let mut expect: Vec<&[u8]> = Vec::new();
        if gso {
            expect.extend([&p[..1000], &p[1000..2000], &p[2000..3000]]);
        }
        expect.extend([&p[..50], &p[2000..2300]]);
        assert_eq!(got, expect);
        let many = vec![TxPiece::Bytes(&p[..1]); MAX_PIECES + 1];
        let e = a.send(&[TxMsg { dst: to, tos: 0, data: &[], pieces: &many, segment: None }]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn loopback_batch_with_tos_and_gso() {
        for any in ["127.0.0.1:0", "[::1]:0"] {
            let mut a = UdpIo::bind(any.parse().unwrap()).unwrap();
            let mut b = UdpIo::bind(any.parse().unwrap()).unwrap();
            let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
            let msgs = [
                TxMsg { dst: b.local_addr(), tos: 0x0a, data: &payload[..100], pieces: &[], segment: None },
                TxMsg {
                    dst: b.local_addr(),
                    tos: 0x03,
                    data: &payload[..3000],
                    pieces: &[],
                    segment: Some(1000),
                },
            ];
            let sent = a.send(&msgs).unwrap();
            assert_eq!(sent, 2);
            let mut bufs = vec![vec![0u8; RX_BUF]; 8];
            let mut metas = [RxMeta::default(); 8];
            let mut datagrams = Vec::new();
            for _ in 0..1000 {
                let n = b.recv(&mut bufs, &mut metas).unwrap();
                for i in 0..n {
                    let m = metas[i];
                    assert_eq!(m.src, a.local_addr());
                    assert_eq!(m.dst_ip, Some(b.local_addr().ip()));
                    assert_eq!(m.ttl, TTL, "{any}");
                    for chunk in bufs[i][..m.len].chunks(m.stride) {
                        datagrams.push((m.tos, chunk.len()));
                    }
                }
                if datagrams.len() >= (if a.gso() { 4 } else { 2 }) {
                    break;
                }
                std::thread::yield_now();
            }
            if a.gso() {
                assert_eq!(datagrams, vec![(0x0a, 100), (0x03, 1000), (0x03, 1000), (0x03, 1000)], "{any}");
            } else {
                assert_eq!(datagrams[0], (0x0a, 100), "{any}");
            }
        }
    }
}
