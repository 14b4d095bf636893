//! The server's queueing delay as the kernel sees it: how long a new
//! connection's first bytes (its ClientHello) sat in the socket before the
//! server got to them.
//!
//! Admission control needs a queue signal that a slow client cannot fake.
//! Timing from `accept()` to the first byte read counts the time the client
//! took to send its ClientHello, so a client too busy to send promptly
//! reads as server queueing (seen in issue 13's runs, where one saturated
//! client thread made the controller cut the limit). The kernel stamps each
//! received segment (`SO_TIMESTAMPNS`, inherited by accepted sockets from
//! the listener); a `MSG_PEEK` of one byte when the connection's task first
//! runs returns that stamp without consuming anything. `now − stamp` is the
//! time the bytes waited: in the accept queue, then for the task to be
//! scheduled. It starts when the bytes arrived, not when the client
//! connected.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};

/// Asks the kernel to stamp the bytes received on `listener`'s connections
/// (accepted sockets inherit the option).
pub(crate) fn stamp_arrivals(listener: &TcpListener) -> io::Result<()> {
    setsockopt(listener, sockopt::ReceiveTimestampns, &true).map_err(io::Error::from)
}

/// What the first peek found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FirstBytes {
    /// Bytes are there, received at this time (`None`: the kernel gave no
    /// stamp, e.g. the option could not be set).
    Arrived(Option<SystemTime>),
    /// The peer closed without sending anything.
    Closed,
}

/// Waits until `stream` has bytes to read and returns when they arrived,
/// consuming nothing.
pub(crate) async fn first_bytes(stream: &TcpStream) -> io::Result<FirstBytes> {
    loop {
        stream.readable().await?;
        match stream.try_io(Interest::READABLE, || peek(stream)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

/// How long bytes received at `arrived` have waited, now (zero if the
/// clock stepped back).
pub(crate) fn waited(arrived: SystemTime) -> Duration {
    SystemTime::now()
        .duration_since(arrived)
        .unwrap_or(Duration::ZERO)
}

fn peek(stream: &TcpStream) -> io::Result<FirstBytes> {
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let msg = recvmsg::<()>(
        stream.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    if msg.bytes == 0 {
        return Ok(FirstBytes::Closed);
    }
    let stamp = msg.cmsgs().ok().and_then(|mut it| {
        it.find_map(|c| match c {
            ControlMessageOwned::ScmTimestampns(ts) => {
                let d = Duration::new(ts.tv_sec().max(0) as u64, ts.tv_nsec().max(0) as u32);
                Some(SystemTime::UNIX_EPOCH + d)
            }
            _ => None,
        })
    });
    Ok(FirstBytes::Arrived(stamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_kernel_stamp_measures_how_long_the_bytes_waited_and_consumes_nothing() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        stamp_arrivals(&l).unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        c.write_all(b"hello").await.unwrap();
        // The bytes wait 150 ms before the server looks: that is the delay,
        // not the time between accept and the client's write.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let FirstBytes::Arrived(Some(at)) = first_bytes(&s).await.unwrap() else {
            panic!("no kernel timestamp on a listener with SO_TIMESTAMPNS");
        };
        let w = waited(at);
        assert!(
            w >= Duration::from_millis(140) && w < Duration::from_secs(5),
            "{w:?}"
        );
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello", "the peek consumed nothing");
    }

    #[tokio::test]
    async fn a_slow_client_is_not_server_queueing() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        stamp_arrivals(&l).unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        let peek = tokio::spawn(async move { first_bytes(&s).await });
        // The client waits 200 ms before sending; the server was waiting.
        tokio::time::sleep(Duration::from_millis(200)).await;
        c.write_all(b"x").await.unwrap();
        let FirstBytes::Arrived(Some(at)) = peek.await.unwrap().unwrap() else {
            panic!("no stamp");
        };
        assert!(waited(at) < Duration::from_millis(100), "{:?}", waited(at));
    }

    #[tokio::test]
    async fn a_close_without_bytes_is_reported() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        stamp_arrivals(&l).unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        drop(c);
        assert_eq!(first_bytes(&s).await.unwrap(), FirstBytes::Closed);
    }
}
