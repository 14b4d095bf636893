//! Client source addresses (`--source-ip RANGE`, `--clients-per-ip N`):
//! each client binds its sockets to one address of a range, so a balancer
//! sees many clients (source-IP affinity), or N clients behind one address
//! (a NAT or proxy).
//!
//! Client `i` uses address `(i / N) mod len(RANGE)`. Ports are chosen at
//! connect time (`IP_BIND_ADDRESS_NO_PORT`), so each address has the whole
//! ephemeral range per destination.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::net::{TcpSocket, TcpStream};

/// The most addresses a range may name.
pub const MAX_ADDRS: u128 = 1 << 20;

/// A range of local source addresses and how many clients share each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceAddrs {
    first: IpAddr,
    len: u128,
    per_ip: u32,
}

impl SourceAddrs {
    /// Parses `RANGE`: one address (`127.0.0.2`), an inclusive range
    /// (`127.0.0.2-127.0.0.254`) or a CIDR block (`127.0.0.0/24`; for an
    /// IPv4 block of 4 or more addresses the network and broadcast
    /// addresses are left out). `per_ip` clients share each address.
    pub fn parse(range: &str, per_ip: u32) -> Result<SourceAddrs, String> {
        if per_ip == 0 {
            return Err("--clients-per-ip must be at least 1".into());
        }
        let bad = |why: &str| {
            format!(
                "--source-ip {range:?}: {why}; give an address (127.0.0.2), a range \
                 (127.0.0.2-127.0.0.254) or a CIDR block (127.0.0.0/24)"
            )
        };
        let ip = |s: &str| -> Result<IpAddr, String> {
            s.trim()
                .parse::<IpAddr>()
                .map_err(|_| bad(&format!("{s:?} is not an IP address")))
        };
        let (first, last) = if let Some((a, b)) = range.split_once('-') {
            (ip(a)?, ip(b)?)
        } else if let Some((a, bits)) = range.split_once('/') {
            let a = ip(a)?;
            let width = if a.is_ipv4() { 32 } else { 128 };
            let bits: u32 = bits
                .trim()
                .parse()
                .ok()
                .filter(|b| *b <= width)
                .ok_or_else(|| bad(&format!("the prefix length must be 0 to {width}")))?;
            let host_bits = width - bits;
            let mask = if host_bits >= 128 {
                u128::MAX
            } else {
                (1u128 << host_bits) - 1
            };
            let lo = to_u128(a) & !mask;
            let hi = lo | mask;
            let (lo, hi) = if a.is_ipv4() && host_bits >= 2 {
                (lo + 1, hi - 1)
            } else {
                (lo, hi)
            };
            (from_u128(lo, a.is_ipv4()), from_u128(hi, a.is_ipv4()))
        } else {
            let a = ip(range)?;
            (a, a)
        };
        if first.is_ipv4() != last.is_ipv4() {
            return Err(bad("the two ends are of different address families"));
        }
        let (lo, hi) = (to_u128(first), to_u128(last));
        if hi < lo {
            return Err(bad("the range ends before it starts"));
        }
        let len = hi - lo + 1;
        if len > MAX_ADDRS {
            return Err(bad(&format!("at most {MAX_ADDRS} addresses")));
        }
        Ok(SourceAddrs { first, len, per_ip })
    }

    /// How many addresses the range holds.
    pub fn len(&self) -> u128 {
        self.len
    }

    /// Whether the range is empty (never: a range holds at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many clients share one address.
    pub fn per_ip(&self) -> u32 {
        self.per_ip
    }

    /// The address client `client` binds to.
    pub fn for_client(&self, client: u32) -> IpAddr {
        let k = u128::from(client / self.per_ip) % self.len;
        from_u128(to_u128(self.first) + k, self.first.is_ipv4())
    }

    /// How many distinct addresses `clients` clients use.
    pub fn used(&self, clients: usize) -> u128 {
        let groups = (clients as u128).div_ceil(u128::from(self.per_ip));
        groups.min(self.len)
    }

    /// `first-last (N addresses), K clients per address`.
    pub fn describe(&self) -> String {
        let last = from_u128(to_u128(self.first) + self.len - 1, self.first.is_ipv4());
        format!(
            "{}-{} ({} addresses), {} client(s) per address",
            self.first, last, self.len, self.per_ip
        )
    }
}

fn to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(v: u128, v4: bool) -> IpAddr {
    if v4 {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(v))
    }
}

/// Connects to `addr` from `source` (any local address when `None`).
pub async fn connect(source: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    connect_mss(source, None, addr).await
}

/// [`connect`], announcing `mss` as the maximum segment size (TCP_MAXSEG
/// before the SYN) when given.
pub async fn connect_mss(
    source: Option<IpAddr>,
    mss: Option<u32>,
    addr: SocketAddr,
) -> std::io::Result<TcpStream> {
    if source.is_none() && mss.is_none() {
        return TcpStream::connect(addr).await;
    }
    let src = source.unwrap_or(match addr {
        SocketAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    });
    let sock = match (src, addr) {
        (IpAddr::V4(_), SocketAddr::V4(_)) => TcpSocket::new_v4()?,
        (IpAddr::V6(_), SocketAddr::V6(_)) => TcpSocket::new_v6()?,
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "--source-ip {src} and the target {addr} are of different address families"
                ),
            ));
        }
    };
    // Pick the port at connect, not at bind: many connections from one
    // address to different destinations may then share source ports.
    if src.is_ipv4() {
        let _ = nix::sys::socket::setsockopt(
            &sock,
            nix::sys::socket::sockopt::IpBindAddressNoPort,
            &true,
        );
    }
    if let Some(mss) = mss {
        nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::TcpMaxSeg, &mss)
            .map_err(std::io::Error::from)?;
    }
    if source.is_some() {
        sock.bind(SocketAddr::new(src, 0))?;
    }
    sock.connect(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_map_clients() {
        let r = SourceAddrs::parse("127.0.0.2-127.0.0.4", 1).unwrap();
        assert_eq!(r.len(), 3);
        let got: Vec<String> = (0..5).map(|i| r.for_client(i).to_string()).collect();
        assert_eq!(
            got,
            [
                "127.0.0.2",
                "127.0.0.3",
                "127.0.0.4",
                "127.0.0.2",
                "127.0.0.3"
            ]
        );
        let nat = SourceAddrs::parse("127.0.0.2-127.0.0.4", 4).unwrap();
        assert_eq!(nat.for_client(3).to_string(), "127.0.0.2");
        assert_eq!(nat.for_client(4).to_string(), "127.0.0.3");
        assert_eq!(nat.used(8), 2);
        assert_eq!(r.used(8), 3);
        let one = SourceAddrs::parse("127.0.0.9", 1).unwrap();
        assert_eq!(
            (one.len(), one.for_client(7).to_string().as_str()),
            (1, "127.0.0.9")
        );
        let cidr = SourceAddrs::parse("127.0.0.0/24", 1).unwrap();
        assert_eq!(cidr.len(), 254);
        assert_eq!(cidr.for_client(0).to_string(), "127.0.0.1");
        assert_eq!(cidr.for_client(253).to_string(), "127.0.0.254");
        assert_eq!(SourceAddrs::parse("127.0.0.8/31", 1).unwrap().len(), 2);
        assert_eq!(SourceAddrs::parse("::1/128", 1).unwrap().len(), 1);
        for bad in [
            "127.0.0.5-127.0.0.2",
            "nonsense",
            "127.0.0.1-::1",
            "127.0.0.0/33",
            "10.0.0.0/8",
        ] {
            assert!(SourceAddrs::parse(bad, 1).is_err(), "{bad}");
        }
        assert!(SourceAddrs::parse("127.0.0.1", 0).is_err());
        assert!(r.describe().contains("127.0.0.2-127.0.0.4 (3 addresses)"));
    }

    #[tokio::test]
    async fn connects_from_the_chosen_address() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let src: IpAddr = "127.0.0.7".parse().unwrap();
        let (c, a) = tokio::join!(connect(Some(src), addr), l.accept());
        let (_, peer) = a.unwrap();
        assert_eq!(c.unwrap().local_addr().unwrap().ip(), src);
        assert_eq!(peer.ip(), src);
        let v6: IpAddr = "::1".parse().unwrap();
        assert!(connect(Some(v6), addr).await.is_err());
    }
}
