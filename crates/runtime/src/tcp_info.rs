//! The kernel's TCP_INFO for a socket: segments, MSS, congestion window and
//! retransmissions, as `ss -ti` shows them.
//!
//! Neither nix 0.30 nor socket2 0.6 nor rustix 1.1 exposes TCP_INFO, so
//! this is one of the workspace's three `unsafe` places (the others are
//! the counting allocator, costs/alloc.rs, and udp_queue.rs's ioctl): a
//! `getsockopt` into a zeroed `libc::tcp_info` of the size passed, which
//! the kernel fills up to that size (older kernels fill less; the rest
//! stays zero).

use std::os::fd::{AsRawFd, RawFd};

/// The TCP_INFO fields tlslab reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// Segments sent, retransmissions and pure ACKs included
    /// (`tcpi_segs_out`).
    pub segs_out: u32,
    /// Segments received (`tcpi_segs_in`).
    pub segs_in: u32,
    /// Segments sent that carried data (`tcpi_data_segs_out`).
    pub data_segs_out: u32,
    /// Segments received that carried data (`tcpi_data_segs_in`).
    pub data_segs_in: u32,
    /// The MSS this end sends with (`tcpi_snd_mss`).
    pub snd_mss: u32,
    /// This end's estimate of the peer's MSS (`tcpi_rcv_mss`).
    pub rcv_mss: u32,
    /// The congestion window, in segments (`tcpi_snd_cwnd`).
    pub snd_cwnd: u32,
    /// Retransmitted segments over the connection's life
    /// (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Smoothed RTT, µs (`tcpi_rtt`).
    pub rtt_us: u32,
}

/// Reads TCP_INFO of `sock`.
pub fn tcp_info(sock: &impl AsRawFd) -> std::io::Result<TcpInfo> {
    tcp_info_fd(sock.as_raw_fd())
}

/// Reads TCP_INFO of the socket `fd` (an error if `fd` is not an open TCP
/// socket; the kernel only writes into this function's own buffer, so a
/// stale descriptor cannot corrupt memory).
pub fn tcp_info_fd(fd: RawFd) -> std::io::Result<TcpInfo> {
    let raw = getsockopt_tcp_info(fd)?;
    Ok(TcpInfo {
        segs_out: raw.tcpi_segs_out,
        segs_in: raw.tcpi_segs_in,
        data_segs_out: raw.tcpi_data_segs_out,
        data_segs_in: raw.tcpi_data_segs_in,
        snd_mss: raw.tcpi_snd_mss,
        rcv_mss: raw.tcpi_rcv_mss,
        snd_cwnd: raw.tcpi_snd_cwnd,
        total_retrans: raw.tcpi_total_retrans,
        rtt_us: raw.tcpi_rtt,
    })
}

#[allow(unsafe_code)]
fn getsockopt_tcp_info(fd: RawFd) -> std::io::Result<libc::tcp_info> {
    // SAFETY: `tcp_info` is a plain C struct of integers, so all-zero is a
    // valid value; getsockopt writes at most `len` bytes into it and
    // stores the length written in `len`; neither pointer outlives the call.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn counts_the_segments_of_a_loopback_exchange() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[1u8; 100]).unwrap();
        let mut buf = [0u8; 100];
        s.read_exact(&mut buf).unwrap();
        let ci = tcp_info(&c).unwrap();
        let si = tcp_info(&s).unwrap();
        assert!(ci.data_segs_out >= 1, "{ci:?}");
        assert!(si.data_segs_in >= 1, "{si:?}");
        assert!(ci.snd_mss > 0 && ci.snd_cwnd > 0, "{ci:?}");
        // Not a socket: an error, not garbage.
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(tcp_info(&f).is_err());
    }
}
