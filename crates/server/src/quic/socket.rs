//! The QUIC listener's UDP socket: its receive buffer, and the datagrams
//! the kernel dropped when it was full.
//!
//! An overloaded QUIC server's new attempts wait in one place, the
//! socket's receive queue, as a TCP server's wait in its accept queue, and
//! beyond the buffer the kernel drops them unseen. The system's default
//! (`net.core.rmem_default`, 208 KB here) holds about 90 loopback
//! datagrams of 1,200 bytes: tens of milliseconds at a few thousand a
//! second. Under `overload --h3` at 3x, 12,223 datagrams were dropped so
//! on the server's socket in one sweep (`ss -u -m`'s `d`). A larger buffer
//! (`--quic-recv-buffer`) turns drops into queueing delay, which admission
//! control sees ([`super::sniff`]); but it also lets a flood of junk
//! Initials queue ahead of real clients: with 4 MiB, a 50,000/s junk flood
//! held the queue near its 90 ms and `session` shed real clients' new
//! handshakes (legitimate goodput 0.79 of no flood, against 1.00 with the
//! default, `bench/quic_flood_policies.sh`). The default is the system's;
//! the drops are reported either way (`receive_drops`).

use std::io;
use std::net::UdpSocket;

use nix::sys::socket::{getsockopt, setsockopt, sockopt};

/// With `bytes`, asks for a receive buffer that large on `socket`
/// (`SO_RCVBUF`, and past `net.core.rmem_max`, `SO_RCVBUFFORCE`, which
/// needs CAP_NET_ADMIN); returns the kernel's figure for the buffer: twice
/// the bytes granted (its bookkeeping included).
pub(super) fn size_recv_buffer(socket: &UdpSocket, bytes: Option<usize>) -> io::Result<usize> {
    let Some(bytes) = bytes else {
        return Ok(getsockopt(socket, sockopt::RcvBuf)?);
    };
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
        assert_eq!(size_recv_buffer(&s, None).unwrap(), before);
        let got = size_recv_buffer(&s, Some(1 << 20)).unwrap();
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
