//! What the kernel knows of a UDP socket's receive queue: when it received
//! the last datagram the program read, and how many datagrams it dropped
//! because the queue was full.
//!
//! The QUIC listener's admission control needs the time an Initial waited
//! in the socket's receive queue before quinn read it: over TCP that is
//! read from a `SO_TIMESTAMPNS` control message on a one-byte peek
//! (`tlslab-server`'s queue.rs), but quinn reads its socket with
//! `recvmmsg` into control buffers sized for the messages it asks for, and
//! a timestamp message beside them would be truncated there.
//! [`last_receive_stamp`] uses `ioctl(SIOCGSTAMPNS)` instead, which asks
//! for no control message: once called, the kernel keeps the stamp of each
//! datagram read (the socket's `sk_stamp`), and the ioctl returns it. After
//! a batch read it is the stamp of the batch's last datagram, the youngest
//! of it: how long it waited is a lower bound for the rest of the batch.
//! Neither nix 0.30 nor socket2 0.6 exposes this ioctl, so it is one of the
//! workspace's `unsafe` places: the kernel writes one `timespec` into this
//! function's own buffer.
//!
//! [`receive_drops`] reads the socket's drop count (datagrams that found
//! its receive buffer full) from `/proc/net/udp` and `/proc/net/udp6`, the
//! column `ss -u -m` shows as `d`: a server whose buffer overflows loses
//! Initials silently, and its clients wait a probe timeout to resend them.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, SystemTime};

/// `SIOCGSTAMPNS` (`SIOCGSTAMPNS_OLD` in the kernel's headers, which on
/// 64-bit Linux returns the 64-bit `timespec` that `libc::timespec` is).
#[cfg(target_pointer_width = "64")]
const SIOCGSTAMPNS: libc::c_ulong = 0x8907;

/// The receive stamp of the last datagram `sock` read: `Ok(None)` before
/// the first datagram read after the first call (the first call also
/// turns the kernel's stamping on for the socket).
pub fn last_receive_stamp(sock: &impl AsRawFd) -> io::Result<Option<SystemTime>> {
    match siocgstampns(sock.as_raw_fd()) {
        Ok((sec, nsec)) => {
            let since_epoch = Duration::new(sec.max(0) as u64, nsec.clamp(0, 999_999_999) as u32);
            Ok(Some(SystemTime::UNIX_EPOCH + since_epoch))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// How long the last datagram `sock` read had waited in the kernel when
/// it was read, measured now (zero if none was stamped yet, or the clock
/// stepped back). Call it right after the read.
pub fn last_datagram_waited(sock: &impl AsRawFd) -> Duration {
    match last_receive_stamp(sock) {
        Ok(Some(at)) => SystemTime::now().duration_since(at).unwrap_or_default(),
        _ => Duration::ZERO,
    }
}

/// The datagrams the kernel dropped for `sock` because its receive buffer
/// was full, since it was opened (`/proc/net/udp[6]`'s `drops`, matched by
/// the socket's inode).
pub fn receive_drops(sock: &impl AsRawFd) -> io::Result<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", sock.as_raw_fd()))?;
    let inode = link
        .to_str()
        .and_then(|l| l.strip_prefix("socket:["))
        .and_then(|l| l.strip_suffix(']'))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a socket"))?;
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(9) == Some(&inode) {
                return f.get(12).and_then(|d| d.parse().ok()).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{table}: no drops column"),
                    )
                });
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("socket inode {inode} is in neither /proc/net/udp nor /proc/net/udp6"),
    ))
}

#[cfg(target_pointer_width = "64")]
#[allow(unsafe_code)]
fn siocgstampns(fd: RawFd) -> io::Result<(i64, i64)> {
    // SAFETY: `timespec` is a plain C struct of integers, so all-zero is a
    // valid value; the ioctl writes at most one `timespec` into it and the
    // pointer does not outlive the call. A descriptor that is not a socket
    // gets ENOTTY, not a write.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        if libc::ioctl(fd, SIOCGSTAMPNS as _, &mut ts as *mut libc::timespec) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((ts.tv_sec as i64, ts.tv_nsec as i64))
    }
}

#[cfg(not(target_pointer_width = "64"))]
fn siocgstampns(_fd: RawFd) -> io::Result<(i64, i64)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "SIOCGSTAMPNS is read only on 64-bit Linux",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn a_datagram_left_in_the_queue_reads_as_having_waited() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        // Nothing read yet: no stamp (and stamping is now on).
        assert_eq!(last_receive_stamp(&rx).unwrap(), None);
        assert_eq!(last_datagram_waited(&rx), Duration::ZERO);
        // The kernel may turn stamping on from a work queue.
        std::thread::sleep(Duration::from_millis(100));
        tx.send_to(b"first", rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        tx.send_to(b"second", rx.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 16];
        rx.recv(&mut buf).unwrap();
        let first = last_datagram_waited(&rx);
        rx.recv(&mut buf).unwrap();
        let second = last_datagram_waited(&rx);
        // The first waited the sleep; the second, sent after it, did not.
        assert!(first >= Duration::from_millis(60), "{first:?}");
        assert!(second < first, "{second:?} vs {first:?}");
        // Not a socket: an error, not garbage.
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(last_receive_stamp(&f).is_err());
        assert!(receive_drops(&f).is_err());
    }

    #[test]
    fn datagrams_beyond_a_full_receive_buffer_count_as_drops() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::RcvBuf, &4096).unwrap();
        assert_eq!(receive_drops(&rx).unwrap(), 0);
        // A few KB of buffer hold a couple of 1,200-byte datagrams: of 50
        // sent and none read, most are dropped.
        for _ in 0..50 {
            tx.send_to(&[0u8; 1200], rx.local_addr().unwrap()).unwrap();
        }
        let drops = receive_drops(&rx).unwrap();
        assert!((40..=50).contains(&drops), "{drops}");
    }
}
