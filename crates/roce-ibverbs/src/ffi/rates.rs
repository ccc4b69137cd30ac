//! The static-rate conversions of `<infiniband/verbs.h>` (`enum ibv_rate`,
//! IBTA vol. 1 9.11.2 StaticRate): as multiples of the 2.5 Gb/s base rate
//! (`ibv_rate_to_mult`, `mult_to_ibv_rate`) and as Mb/s at the lanes'
//! signalling rates (`ibv_rate_to_mbps`, `mbps_to_ibv_rate`), with the
//! values of rdma-core's `verbs.c`. An unknown rate gives -1, an unknown
//! figure `IBV_RATE_MAX` (0).

use std::ffi::c_int;

/// (`enum ibv_rate`, multiple of 2.5 Gb/s or 0 if none, Mb/s).
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),       // 2.5 Gb/s
    (5, 2, 5000),       // 5
    (3, 4, 10000),      // 10
    (6, 8, 20000),      // 20
    (4, 12, 30000),     // 30
    (7, 16, 40000),     // 40
    (8, 24, 60000),     // 60
    (9, 32, 80000),     // 80
    (10, 48, 120000),   // 120
    (11, 0, 14062),     // 14 (FDR lane)
    (12, 0, 56250),     // 56
    (13, 0, 112500),    // 112
    (14, 0, 168750),    // 168
    (15, 0, 25781),     // 25 (EDR lane)
    (16, 0, 103125),    // 100
    (17, 0, 206250),    // 200
    (18, 0, 309375),    // 300
    (19, 11, 28125),    // 28
    (20, 20, 53125),    // 50
    (21, 160, 425000),  // 400
    (22, 240, 637500),  // 600
    (23, 320, 850000),  // 800
    (24, 480, 1275000), // 1200
];

const IBV_RATE_MAX: c_int = 0;

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate && r.1 != 0).map_or(-1, |r| r.1)
}

#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES.iter().find(|r| r.1 == mult && mult != 0).map_or(IBV_RATE_MAX, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(IBV_RATE_MAX, |r| r.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_trip_as_rdma_core_tabulates_them() {
        // IBV_RATE_40_GBPS = 7: 16 x 2.5 Gb/s, 40,000 Mb/s.
        assert_eq!(ibv_rate_to_mult(7), 16);
        assert_eq!(mult_to_ibv_rate(16), 7);
        assert_eq!(ibv_rate_to_mbps(7), 40000);
        assert_eq!(mbps_to_ibv_rate(40000), 7);
        // IBV_RATE_100_GBPS (16) has no 2.5 Gb/s multiple.
        assert_eq!(ibv_rate_to_mult(16), -1);
        assert_eq!(ibv_rate_to_mbps(16), 103125);
        assert_eq!(ibv_rate_to_mult(0), -1);
        assert_eq!(mult_to_ibv_rate(3), IBV_RATE_MAX);
        assert_eq!(mbps_to_ibv_rate(1), IBV_RATE_MAX);
        for &(rate, mult, mbps) in RATES {
            assert_eq!(mbps_to_ibv_rate(mbps), rate);
            if mult != 0 {
                assert_eq!(mult_to_ibv_rate(ibv_rate_to_mult(rate)), rate);
            }
        }
    }
}
