//! Completion status (NVMe Base 2.0, 4.6.1.2 "Status Field"): a status
//! code type (SCT), a status code (SC), and Do Not Retry.

use std::fmt;

/// The status of a completion. In the CQE's 16-bit status field, bit 0 is
/// the phase tag, bits 8:1 SC, 11:9 SCT, 15 DNR (the Linux host's
/// `status >> 1` is `dnr << 14 | sct << 8 | sc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    pub sct: u8,
    pub sc: u8,
    pub dnr: bool,
}

impl Status {
    const fn generic(sc: u8) -> Status {
        Status { sct: 0, sc, dnr: true }
    }
    const fn specific(sc: u8) -> Status {
        Status { sct: 1, sc, dnr: true }
    }

    pub const SUCCESS: Status = Status { sct: 0, sc: 0, dnr: false };
    // Generic command status (SCT 0), NVMe Base 2.0 Fig. 94.
    pub const INVALID_OPCODE: Status = Status::generic(0x01);
    pub const INVALID_FIELD: Status = Status::generic(0x02);
    pub const DATA_TRANSFER_ERROR: Status = Status::generic(0x04);
    pub const INTERNAL_ERROR: Status = Status::generic(0x06);
    pub const ABORT_REQUESTED: Status = Status::generic(0x07);
    pub const ABORTED_SQ_DELETION: Status = Status::generic(0x08);
    pub const INVALID_NAMESPACE: Status = Status::generic(0x0B);
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::generic(0x0C);
    pub const INVALID_SGL_SEGMENT: Status = Status::generic(0x0D);
    pub const INVALID_SGL_COUNT: Status = Status::generic(0x0E);
    pub const DATA_SGL_LENGTH_INVALID: Status = Status::generic(0x0F);
    pub const SGL_TYPE_INVALID: Status = Status::generic(0x11);
    pub const LBA_OUT_OF_RANGE: Status = Status::generic(0x80);
    pub const CAPACITY_EXCEEDED: Status = Status::generic(0x81);
    // Command specific status (SCT 1), Fig. 95 and NVMe-oF 1.1 Fig. 12.
    pub const INVALID_QUEUE_ID: Status = Status::specific(0x01);
    pub const INVALID_QUEUE_SIZE: Status = Status::specific(0x02);
    pub const ASYNC_EVENT_LIMIT: Status = Status::specific(0x05);
    pub const INVALID_LOG_PAGE: Status = Status::specific(0x09);
    pub const FEATURE_NOT_SAVEABLE: Status = Status::specific(0x0D);
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::specific(0x80);
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::specific(0x81);
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::specific(0x82);
    pub const CONNECT_INVALID_HOST: Status = Status::specific(0x84);

    pub fn is_success(&self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The 16-bit status field with phase tag `phase`.
    pub fn to_field(self, phase: bool) -> u16 {
        (u16::from(self.dnr) << 15)
            | (u16::from(self.sct & 7) << 9)
            | (u16::from(self.sc) << 1)
            | u16::from(phase)
    }

    pub fn from_field(v: u16) -> Status {
        Status { sct: ((v >> 9) & 7) as u8, sc: (v >> 1) as u8, dnr: v & 0x8000 != 0 }
    }

    fn name(&self) -> Option<&'static str> {
        Some(match (self.sct, self.sc) {
            (0, 0x00) => "success",
            (0, 0x01) => "invalid command opcode",
            (0, 0x02) => "invalid field in command",
            (0, 0x04) => "data transfer error",
            (0, 0x06) => "internal error",
            (0, 0x07) => "command abort requested",
            (0, 0x08) => "command aborted due to SQ deletion",
            (0, 0x0B) => "invalid namespace or format",
            (0, 0x0C) => "command sequence error",
            (0, 0x0D) => "invalid SGL segment descriptor",
            (0, 0x0E) => "invalid number of SGL descriptors",
            (0, 0x0F) => "data SGL length invalid",
            (0, 0x11) => "SGL descriptor type invalid",
            (0, 0x80) => "LBA out of range",
            (0, 0x81) => "capacity exceeded",
            (1, 0x01) => "invalid queue identifier",
            (1, 0x02) => "invalid queue size",
            (1, 0x05) => "asynchronous event request limit exceeded",
            (1, 0x09) => "invalid log page",
            (1, 0x0D) => "feature identifier not saveable",
            (1, 0x80) => "connect: incompatible format",
            (1, 0x81) => "connect: controller busy",
            (1, 0x82) => "connect: invalid parameters",
            (1, 0x84) => "connect: invalid host",
            _ => return None,
        })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} (SCT {:#x}, SC {:#04x})", self.sct, self.sc),
            None => write!(f, "status SCT {:#x} SC {:#04x}", self.sct, self.sc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_is_laid_out_as_the_linux_host_reads_it() {
        // Linux: NVME_SC_CONNECT_INVALID_PARAM = 0x182 and NVME_SC_DNR =
        // 0x4000, both in `le16_to_cpu(cqe->status) >> 1`.
        let f = Status::CONNECT_INVALID_PARAMETERS.to_field(false);
        assert_eq!(f >> 1, 0x4000 | 0x182);
        assert_eq!(Status::from_field(f), Status::CONNECT_INVALID_PARAMETERS);
        assert_eq!(Status::SUCCESS.to_field(true), 1);
        assert_eq!(Status::LBA_OUT_OF_RANGE.to_string(), "LBA out of range (SCT 0x0, SC 0x80)");
    }
}
