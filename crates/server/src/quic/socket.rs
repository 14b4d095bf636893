//! The QUIC listener's UDP socket: its receive buffer, sized for bursts of
//! Initials, and the datagrams the kernel dropped when it was full anyway.
//!
//! An overloaded QUIC server's new attempts wait in one place, the
//! socket's receive queue, as a TCP server's wait in its accept queue. The
//! kernel's default (`net.core.rmem_default`, 208 KB here) holds about 90
//! loopback datagrams of 1,200 bytes: at a few thousand datagrams a second
//! it fills in tens of milliseconds, and what follows is dropped, unseen by
//! the server, until the client's probe timeout resends it (a second or so
//! for a first Initial). Under `overload --h3` at 3x, 12,223 datagrams were
//! dropped so on the server's socket in one sweep (`ss -u -m`'s `d`), each
//! a handshake stalled past the users' 1 s timeout. A larger buffer turns
//! those drops into queueing delay, which admission control sees
//! ([`super::sniff`]) and sheds by; the drops left are reported
//! (`receive_drops`).

use std::io;
use std::net::UdpSocket;

use nix::sys::socket::{getsockopt, setsockopt, sockopt};

/// `--quic-recv-buffer`'s default: 4 MiB (nginx and HAProxy leave it to
/// the system; quinn's and msquic's guides ask for a few MB).
pub(super) const DEFAULT_RECV_BUFFER: usize = 4 << 20;

/// Asks for a receive buffer of `bytes` on `socket` (`SO_RCVBUF`, and past
/// `net.core.rmem_max`, `SO_RCVBUFFORCE`, which needs CAP_NET_ADMIN) and
/// returns the kernel's figure for what it set: twice the bytes granted
/// (its bookkeeping included), `rmem_max` at most without the capability.
pub(super) fn size_recv_buffer(socket: &UdpSocket, bytes: usize) -> io::Result<usize> {
    setsockopt(socket, sockopt::RcvBuf, &bytes)?;
    let got = getsockopt(socket, sockopt::RcvBuf)?;
    if got / 2 < bytes {
        // Not root: the smaller buffer stays, and the figure says so.
        let _ = setsockopt(socket, sockopt::RcvBufForce, &bytes);
    }
    Ok(getsockopt(socket, sockopt::RcvBuf)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_asked_for_is_set_up_to_what_the_kernel_allows() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = getsockopt(&s, sockopt::RcvBuf).unwrap();
        let got = size_recv_buffer(&s, 1 << 20).unwrap();
        // Either the whole MiB (doubled) or, without the capability and
        // with a smaller rmem_max, rmem_max (doubled); more than before in
        // either case unless rmem_max is the default itself.
        let max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .map_or(0, |m| m.trim().parse().unwrap_or(0));
        assert!(
            got == 2 << 20 || got == 2 * max.min(1 << 20),
            "{got} (was {before}, rmem_max {max})"
        );
        assert!(got >= before, "{got} < {before}");
    }
}
