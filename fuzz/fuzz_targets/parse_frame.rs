//! Fuzz target for the roce-wire parsers.
//!
//! The input is one Ethernet frame, as a pcap record holds it. It goes through
//!
//! * `RoceFrameRepr::parse` under several `ParseOptions` (ICRC verification on
//!   and off, with and without a path MTU, with and without the responder
//!   rules); every frame that parses is re-emitted with `to_vec` and the
//!   emitted bytes must parse (with the ICRC checked, since emit wrote it) to
//!   an equal repr, emit again to the same bytes, and agree with the input on
//!   every byte the repr describes;
//! * `frame::locate`, whose slices must tile the frame, and which together
//!   with `RocePacketRepr::parse` of the transport bytes must give what the
//!   most lenient `RoceFrameRepr::parse` gives;
//! * `RocePacketRepr::parse` + `check` of the input taken as a bare transport
//!   packet (BTH .. ICRC), with the same round trip through `emit`;
//! * the input wrapped as the transport packet of a valid IPv4, IPv6 and
//!   RoCEv1 frame with a correct ICRC, which must parse exactly as the bare
//!   packet does (this gets past the IP checksum and the ICRC, which random
//!   mutations of whole frames rarely keep valid);
//! * `icrc::compute`/`verify`/`fill` on the raw bytes for each network header.
#![no_main]

use core::net::{Ipv4Addr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use roce_wire::ethernet::{ethertype, EthernetRepr};
use roce_wire::frame::{self, NetRepr};
use roce_wire::icrc::{self, NetHeader, ICRC_LEN};
use roce_wire::packet::{pad_for, RocePacket};
use roce_wire::{
    GrhRepr, Ipv4Repr, Ipv6Repr, ParseOptions, RoceFrameRepr, RocePacketRepr, UdpRepr, ROCE_PORT,
};

const fn opts(verify_icrc: bool, pmtu: Option<usize>, check_rules: bool) -> ParseOptions {
    ParseOptions { port: ROCE_PORT, verify_icrc, pmtu, check_rules }
}

/// The most lenient options: network layers and packet structure only.
const LENIENT: ParseOptions = opts(false, None, false);

const OPTIONS: [ParseOptions; 7] = [
    opts(true, None, true), // ParseOptions::default()
    opts(false, None, true),
    opts(true, Some(1024), true),
    opts(false, Some(1024), true),
    opts(false, Some(4096), true),
    opts(true, Some(256), false),
    LENIENT,
];

const KINDS: [NetHeader; 3] = [NetHeader::Ipv4, NetHeader::Ipv6, NetHeader::Grh];

fuzz_target!(|data: &[u8]| {
    debug_assert_eq!(OPTIONS[0], ParseOptions::default());
    check_frame(data);
    check_packet(data);
    check_wrapped(data);
    check_icrc(data);
});

/// Whole-frame parsing under every set of options, and how the results relate.
fn check_frame(data: &[u8]) {
    let lenient = RoceFrameRepr::parse(data, &LENIENT);
    if let Err(e) = &lenient {
        let _ = (e.to_string(), e.kind(), e.is_not_roce());
    }

    // locate + RocePacketRepr::parse is what the lenient parse does.
    let located = frame::locate(data, ROCE_PORT);
    if let Ok(loc) = &located {
        let eh = loc.eth.header_len();
        assert_eq!(eh + loc.net_bytes.len() + loc.trailer.len(), data.len());
        assert_eq!(loc.net.header_len() + loc.transport.len(), loc.net_bytes.len());
        assert_eq!(&data[eh..eh + loc.net_bytes.len()], loc.net_bytes);
        assert_eq!(&data[eh + loc.net_bytes.len()..], loc.trailer);
        assert_eq!(&loc.net_bytes[loc.net.header_len()..], loc.transport);
    }
    let by_parts =
        located.and_then(|loc| RocePacketRepr::parse(loc.transport).map(|p| (loc.eth, loc.net, p)));
    assert_eq!(
        lenient.clone().map(|f| (f.eth, f.net, f.packet)),
        by_parts,
        "RoceFrameRepr::parse disagrees with locate + RocePacketRepr::parse"
    );

    for o in &OPTIONS {
        let got = frame_round_trip(data, o);
        // Stricter options accept a subset of what the lenient ones do, with
        // the same result; and exactly the frames whose ICRC and rules pass.
        match (&lenient, &got) {
            (Ok(l), Some(r)) => assert_eq!(l, r, "{o:?}"),
            (Err(_), Some(r)) => panic!("{o:?} accepts what LENIENT rejects: {r:?}"),
            (Ok(l), None) => {
                let loc = frame::locate(data, o.port).expect("lenient parse implies locate");
                let icrc_ok = !o.verify_icrc || icrc::verify(loc.net_bytes, l.net.icrc_kind()).is_ok();
                let rules_ok = !o.check_rules || l.packet.check(o.pmtu).is_ok();
                assert!(!(icrc_ok && rules_ok), "{o:?} rejects a frame whose ICRC and rules pass: {l:?}");
            }
            (Err(_), None) => {}
        }
    }
}

/// Parses `data` with `o`; if that works, emits the repr and checks the round
/// trip. Returns the repr.
fn frame_round_trip<'a>(data: &'a [u8], o: &ParseOptions) -> Option<RoceFrameRepr<'a>> {
    let repr = RoceFrameRepr::parse(data, o).ok()?;
    let len = repr.buffer_len().unwrap_or_else(|e| panic!("buffer_len of a parsed frame: {e}\n{repr:?}"));
    let out = repr.to_vec().unwrap_or_else(|e| panic!("cannot re-emit a parsed frame: {e}\n{repr:?}"));
    assert_eq!(out.len(), len);

    let again = RoceFrameRepr::parse(&out, o)
        .unwrap_or_else(|e| panic!("emitted frame does not parse ({o:?}): {e}\n{repr:?}"));
    assert_eq!(again, repr, "round trip changed the repr ({o:?})");
    let verified = RoceFrameRepr::parse(&out, &ParseOptions { verify_icrc: true, ..*o })
        .unwrap_or_else(|e| panic!("emitted frame fails with the ICRC checked: {e}\n{repr:?}"));
    assert_eq!(verified, repr);
    assert_eq!(again.to_vec().unwrap(), out, "emit is not a function of the repr");

    compare_bytes(data, &out, &repr, o.verify_icrc);
    Some(repr)
}

/// The emitted frame has the input's bytes wherever the repr describes them:
/// Ethernet, IP and UDP headers, BTH, extension headers and payload. The IPv4
/// header checksum is skipped (0x0000 and 0xffff can both be right). When the
/// input's ICRC was verified and its pad bytes are zero, the ICRC and the UDP
/// checksum must come out the same too.
fn compare_bytes(orig: &[u8], out: &[u8], repr: &RoceFrameRepr, icrc_checked: bool) {
    let eh = repr.eth.header_len();
    let nh = repr.net.header_len();
    let th = repr.packet.header_len().unwrap();
    let plen = repr.packet.payload.len();
    let pay_end = eh + nh + th + plen;
    let net_end = eh + nh + repr.packet.buffer_len().unwrap();
    assert_eq!(pay_end + pad_for(plen) + ICRC_LEN, net_end);
    assert!(net_end <= orig.len() && net_end <= out.len());

    let pad_zero = orig[pay_end..net_end - ICRC_LEN].iter().all(|&b| b == 0);
    let whole = icrc_checked && pad_zero;
    let end = if whole { net_end } else { pay_end };

    let mut skip: Vec<core::ops::Range<usize>> = Vec::new();
    match repr.net {
        NetRepr::Ipv4(..) => {
            skip.push(eh + 10..eh + 12);
            if !whole {
                skip.push(eh + 20 + 6..eh + 20 + 8);
            }
        }
        NetRepr::Ipv6(..) if !whole => skip.push(eh + 40 + 6..eh + 40 + 8),
        _ => {}
    }
    for i in 0..end {
        if skip.iter().any(|r| r.contains(&i)) {
            continue;
        }
        assert_eq!(orig[i], out[i], "byte {i} differs after the round trip (whole = {whole})\n{repr:?}");
    }
    assert!(out[pay_end..net_end - ICRC_LEN].iter().all(|&b| b == 0));

    // Padding: kept when it was all zeros, dropped otherwise.
    let trailer = &orig[net_end..];
    if trailer.iter().all(|&b| b == 0) {
        assert_eq!(repr.padding, trailer.len());
        assert_eq!(out.len(), orig.len());
    } else {
        assert_eq!(repr.padding, 0);
        assert_eq!(out.len(), net_end);
    }
    assert!(out[net_end..].iter().all(|&b| b == 0));
}

/// The input as a bare transport packet: BTH .. ICRC.
fn check_packet(data: &[u8]) {
    let view = RocePacket::new_checked(data);
    let p = match RocePacketRepr::parse(data) {
        Ok(p) => p,
        Err(e) => {
            let _ = (e.to_string(), e.kind());
            if let Ok(v) = view {
                // The view accepts only what parse_view may still reject for
                // header contents (reserved bits, syndromes, CNP bytes).
                let _ = (v.payload(), v.pad(), v.icrc(), v.bth().opcode());
            }
            return;
        }
    };
    let view = view.expect("RocePacketRepr::parse implies RocePacket::new_checked");
    assert_eq!(view.payload(), p.payload);
    assert_eq!(view.header_len(), p.header_len().unwrap());
    assert_eq!(view.opcode_info(), p.info().unwrap());
    assert!(view.pad().len() < 4);

    let check_none = p.check(None);
    for pmtu in [Some(0), Some(256), Some(1024), Some(4096), Some(p.payload.len())] {
        if let Err(e) = p.check(pmtu) {
            let _ = (e.to_string(), e.kind());
        } else {
            // An MTU only adds rules.
            assert!(check_none.is_ok(), "check({pmtu:?}) passes, check(None) fails");
        }
    }

    // The pad count is derived on emit, so the length comes out the same.
    let n = p.buffer_len().expect("buffer_len of a parsed packet");
    assert_eq!(n, data.len());
    let mut buf = vec![0xa5u8; n + 3];
    let w = p.emit(&mut buf).unwrap_or_else(|e| panic!("cannot re-emit a parsed packet: {e}\n{p:?}"));
    assert_eq!(w, n);
    assert!(buf[n..].iter().all(|&b| b == 0xa5), "emit wrote past its length");
    assert_eq!(buf[n - ICRC_LEN..n], [0; ICRC_LEN], "emit leaves the ICRC zero");
    let hp = p.header_len().unwrap() + p.payload.len();
    assert_eq!(buf[..hp], data[..hp], "headers or payload changed");
    assert!(buf[hp..n - ICRC_LEN].iter().all(|&b| b == 0));

    let q = RocePacketRepr::parse(&buf[..n])
        .unwrap_or_else(|e| panic!("emitted packet does not parse: {e}\n{p:?}"));
    assert_eq!(q, p);
    assert_eq!(q.check(None), check_none);

    // Too small a buffer is an error, not a panic.
    if n > 0 {
        assert!(p.emit(&mut buf[..n - 1]).is_err());
    }
}

/// The input as the transport packet of a well-formed frame of each kind.
fn check_wrapped(data: &[u8]) {
    if data.len() < ICRC_LEN || data.len() > 60_000 {
        return;
    }
    let bare = RocePacketRepr::parse(data);
    let strict = opts(true, None, false);
    for kind in KINDS {
        let f = wrap(data, kind, 0);
        let framed = RoceFrameRepr::parse(&f, &strict).map(|r| {
            assert_eq!(r.net.icrc_kind(), kind);
            assert_eq!(r.padding, 0);
            r.packet
        });
        assert_eq!(framed, bare, "{kind:?} frame and bare packet disagree");
    }
    // With Ethernet padding after the network packet (short frames).
    if data.len() < 32 {
        let f = wrap(data, NetHeader::Ipv4, 64);
        let r = RoceFrameRepr::parse(&f, &strict);
        assert_eq!(r.map(|r| r.packet), bare);
        if let Ok(r) = RoceFrameRepr::parse(&f, &strict) {
            assert_eq!(r.padding, 64);
            // Byte for byte, unless the pad bytes were not zero (emit zeroes them).
            let hp = r.packet.header_len().unwrap() + r.packet.payload.len();
            if data[hp..data.len() - ICRC_LEN].iter().all(|&b| b == 0) {
                assert_eq!(r.to_vec().unwrap(), f);
            }
        }
    }
}

/// Ethernet + network headers (lengths, checksums and ICRC all right) around
/// `transport`, then `pad` zero bytes.
fn wrap(transport: &[u8], kind: NetHeader, pad: usize) -> Vec<u8> {
    let len = transport.len();
    let (et, nh) = match kind {
        NetHeader::Ipv4 => (ethertype::IPV4, 28),
        NetHeader::Ipv6 => (ethertype::IPV6, 48),
        NetHeader::Grh => (ethertype::ROCE_V1, 40),
    };
    let eth =
        EthernetRepr { dst: [0x02, 0, 0, 0, 0, 1], src: [0x02, 0, 0, 0, 0, 2], vlan: None, ethertype: et };
    let udp = UdpRepr { src_port: 0xc000, dst_port: ROCE_PORT, checksum: false };
    let mut f = vec![0u8; eth.header_len() + nh + len + pad];
    eth.emit(&mut f);
    let net = &mut f[eth.header_len()..eth.header_len() + nh + len];
    match kind {
        NetHeader::Ipv4 => {
            Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                tos: 0x02,
                ident: 7,
                dont_frag: true,
                ttl: 64,
            }
            .emit(net, 8 + len);
            udp.emit(&mut net[20..], len);
        }
        NetHeader::Ipv6 => {
            Ipv6Repr {
                src: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
                dst: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
                traffic_class: 0x02,
                flow_label: 0x12345,
                hop_limit: 64,
            }
            .emit(net, 8 + len);
            udp.emit(&mut net[40..], len);
        }
        NetHeader::Grh => {
            GrhRepr { traffic_class: 0, flow_label: 0, hop_limit: 1, sgid: [0xfe; 16], dgid: [0xfd; 16] }
                .emit(net, len)
        }
    }
    net[nh..].copy_from_slice(transport);
    icrc::fill(net, kind);
    f
}

/// ICRC functions on arbitrary bytes: no panic, and fill then verify agrees.
fn check_icrc(data: &[u8]) {
    for kind in KINDS {
        let r = icrc::verify(data, kind);
        if data.len() >= ICRC_LEN {
            let got = icrc::read(data).unwrap();
            let want = icrc::compute(&data[..data.len() - ICRC_LEN], kind);
            assert_eq!(r, if got == want { Ok(got) } else { Err((got, want)) });
            let mut v = data.to_vec();
            icrc::fill(&mut v, kind);
            assert_eq!(icrc::verify(&v, kind), Ok(want));
        } else {
            assert!(r.is_err());
        }
    }
}
