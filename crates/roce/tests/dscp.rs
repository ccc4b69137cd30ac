//! A DSCP is six bits (RFC 2474); the traffic class byte is DSCP << 2 |
//! ECN, so a larger value would lose its high bits and leave with another
//! class. Both places that take one refuse it with a typed error.

#[path = "support/udp_pair.rs"]
mod udp_pair;

use roce::*;
use udp_pair::SideOptions;

#[test]
fn a_dscp_beyond_six_bits_is_refused() {
    let mut cfg = DeviceConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.dscp = 64;
    assert!(matches!(Device::open(cfg), Err(Error::Dscp(64))));

    let (x, y) = (SideOptions::default().open(), SideOptions::default().open());
    for dscp in [64u8, 255] {
        let opts = ConnectOptions { dscp: Some(dscp), ..ConnectOptions::default() };
        let e = x.qp.connect(&y.qp.endpoint(), &opts).unwrap_err();
        assert!(matches!(e, Error::Dscp(d) if d == dscp), "{e}");
        assert!(e.to_string().contains("not a 6-bit value"), "{e}");
        assert_eq!(x.qp.state().unwrap(), QpState::Reset, "a refused connect changes nothing");
    }
    let opts = ConnectOptions { dscp: Some(63), ..ConnectOptions::default() };
    x.qp.connect(&y.qp.endpoint(), &opts).unwrap();
    assert_eq!(x.qp.query().unwrap().av.traffic_class >> 2, 63);
}
