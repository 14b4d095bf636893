//! The ClientHello reassembled from the CRYPTO frames of one or more
//! Initials, bounded in bytes, gaps, entries and age.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::QuicError;
use super::frame::crypto_frames;

/// The most separate byte ranges a [`CryptoStream`] tracks before the
/// client is treated as misbehaving (real clients send one or two).
const MAX_RANGES: usize = 16;

/// One connection's Initial CRYPTO stream, held until its first handshake
/// message (the ClientHello) is whole. Frames may come in any order and
/// overlap; bytes past `max_len` are refused.
#[derive(Clone, Debug)]
pub struct CryptoStream {
    buf: Vec<u8>,
    /// Received byte ranges, sorted, disjoint and not adjacent.
    have: Vec<(usize, usize)>,
    max_len: usize,
}

impl CryptoStream {
    /// A stream that holds at most `max_len` bytes.
    pub fn new(max_len: usize) -> Self {
        CryptoStream {
            buf: Vec::new(),
            have: Vec::new(),
            max_len,
        }
    }

    /// Bytes held (the highest offset received).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Adds `data` at stream offset `offset`.
    pub fn push(&mut self, offset: u64, data: &[u8]) -> Result<(), QuicError> {
        let too_large = |len| QuicError::TooLarge {
            what: "Initial CRYPTO stream",
            len,
            max: self.max_len,
        };
        let start = usize::try_from(offset).map_err(|_| too_large(usize::MAX))?;
        let end = start.checked_add(data.len()).ok_or(too_large(usize::MAX))?;
        if end > self.max_len {
            return Err(too_large(end));
        }
        if data.is_empty() {
            return Ok(());
        }
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        self.buf[start..end].copy_from_slice(data);
        // Merge [start, end) into the sorted ranges.
        let mut s = start;
        let mut e = end;
        self.have.retain(|&(a, b)| {
            if b < s || a > e {
                true
            } else {
                s = s.min(a);
                e = e.max(b);
                false
            }
        });
        let at = self.have.partition_point(|&(a, _)| a < s);
        self.have.insert(at, (s, e));
        if self.have.len() > MAX_RANGES {
            return Err(QuicError::TooLarge {
                what: "gaps in the Initial CRYPTO stream",
                len: self.have.len(),
                max: MAX_RANGES,
            });
        }
        Ok(())
    }

    /// The bytes received without a gap from offset 0.
    pub fn contiguous(&self) -> &[u8] {
        match self.have.first() {
            Some(&(0, end)) => &self.buf[..end],
            _ => &[],
        }
    }

    /// The ClientHello (its 4-byte handshake header and body) once it is
    /// whole, `None` while bytes are missing. Fails if the stream starts
    /// with another message or the ClientHello is longer than this stream
    /// may hold.
    pub fn client_hello(&self) -> Result<Option<&[u8]>, QuicError> {
        let c = self.contiguous();
        let Some(&ty) = c.first() else {
            return Ok(None);
        };
        if ty != 1 {
            return Err(QuicError::NotClientHello { found: ty });
        }
        let Some(len) = c.get(1..4) else {
            return Ok(None);
        };
        let need =
            4 + ((usize::from(len[0]) << 16) | (usize::from(len[1]) << 8) | usize::from(len[2]));
        if need > self.max_len {
            return Err(QuicError::TooLarge {
                what: "ClientHello in Initial packets",
                len: need,
                max: self.max_len,
            });
        }
        Ok(c.get(..need))
    }
}

/// The bounds of a [`HelloAssembler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssemblerLimits {
    /// The most clients whose ClientHello is partly held.
    pub max_entries: usize,
    /// The longest ClientHello (header and body) read.
    pub max_hello_len: usize,
    /// The most bytes held across all entries.
    pub max_bytes: usize,
    /// A partial ClientHello untouched for this long is dropped.
    pub expiry: Duration,
}

impl Default for AssemblerLimits {
    /// 4,096 clients, 16 KiB per ClientHello, 4 MiB in all, 10 s.
    fn default() -> Self {
        AssemblerLimits {
            max_entries: 4096,
            max_hello_len: 16 * 1024,
            max_bytes: 4 * 1024 * 1024,
            expiry: Duration::from_secs(10),
        }
    }
}

/// What a [`HelloAssembler`] has done since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AssemblerStats {
    /// ClientHellos returned whole.
    pub completed: u64,
    /// Partial ClientHellos dropped at the entry or byte limit (the
    /// longest-idle first).
    pub evicted: u64,
    /// Partial ClientHellos dropped because they expired.
    pub expired: u64,
}

#[derive(Debug)]
struct Pending {
    stream: CryptoStream,
    touched: Instant,
}

/// ClientHellos reassembled across datagrams, keyed by the client's
/// Destination Connection ID (every Initial of a client's first flight
/// carries the same one). Entries are bounded in number, in bytes each and
/// in all, and in age; at a limit the longest-idle entry goes first.
#[derive(Debug)]
pub struct HelloAssembler {
    limits: AssemblerLimits,
    entries: HashMap<Vec<u8>, Pending>,
    bytes: usize,
    stats: AssemblerStats,
}

impl HelloAssembler {
    /// An empty assembler with these limits.
    pub fn new(limits: AssemblerLimits) -> Self {
        HelloAssembler {
            limits,
            entries: HashMap::new(),
            bytes: 0,
            stats: AssemblerStats::default(),
        }
    }

    /// Partial ClientHellos held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes held across entries.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Counters since creation.
    pub fn stats(&self) -> AssemblerStats {
        self.stats
    }

    /// Adds the CRYPTO frames of one decrypted Initial payload from the
    /// client whose Initials carry `dcid`; returns the whole ClientHello
    /// (handshake header and body) once it is complete, and forgets it.
    /// An error drops what was held for `dcid`.
    pub fn push(
        &mut self,
        dcid: &[u8],
        payload: &[u8],
        now: Instant,
    ) -> Result<Option<Vec<u8>>, QuicError> {
        let (mut stream, existed) = match self.entries.remove(dcid) {
            Some(p) => {
                self.bytes -= p.stream.buffered();
                (p.stream, true)
            }
            None => (CryptoStream::new(self.limits.max_hello_len), false),
        };
        for f in crypto_frames(payload) {
            let f = f?;
            stream.push(f.offset, f.data)?;
        }
        if let Some(hello) = stream.client_hello()? {
            self.stats.completed += 1;
            return Ok(Some(hello.to_vec()));
        }
        if stream.buffered() == 0 && !existed {
            return Ok(None);
        }
        self.purge(now);
        while !self.entries.is_empty()
            && (self.entries.len() >= self.limits.max_entries
                || self.bytes + stream.buffered() > self.limits.max_bytes)
        {
            self.evict_idlest();
        }
        if self.limits.max_entries == 0 || stream.buffered() > self.limits.max_bytes {
            self.stats.evicted += 1;
            return Ok(None);
        }
        self.bytes += stream.buffered();
        self.entries.insert(
            dcid.to_vec(),
            Pending {
                stream,
                touched: now,
            },
        );
        Ok(None)
    }

    /// Drops entries untouched for the expiry or longer.
    pub fn purge(&mut self, now: Instant) {
        let expiry = self.limits.expiry;
        let before = self.entries.len();
        let mut freed = 0;
        self.entries.retain(|_, p| {
            let keep = now.saturating_duration_since(p.touched) < expiry;
            if !keep {
                freed += p.stream.buffered();
            }
            keep
        });
        self.bytes -= freed;
        self.stats.expired += (before - self.entries.len()) as u64;
    }

    fn evict_idlest(&mut self) {
        let idlest = self
            .entries
            .iter()
            .min_by_key(|(_, p)| p.touched)
            .map(|(k, _)| k.clone());
        if let Some(k) = idlest
            && let Some(p) = self.entries.remove(&k)
        {
            self.bytes -= p.stream.buffered();
            self.stats.evicted += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CRYPTO frame at `offset` carrying `data`.
    fn frame(offset: u8, data: &[u8]) -> Vec<u8> {
        let mut f = vec![0x06, offset, data.len() as u8];
        f.extend(data);
        f
    }

    const HELLO: [u8; 8] = [1, 0, 0, 4, 0xaa, 0xbb, 0xcc, 0xdd];

    #[test]
    fn a_hello_across_two_initials_out_of_order() {
        let mut a = HelloAssembler::new(AssemblerLimits::default());
        let t = Instant::now();
        assert_eq!(a.push(b"cid", &frame(5, &HELLO[5..]), t), Ok(None));
        assert_eq!(a.len(), 1);
        let got = a.push(b"cid", &frame(0, &HELLO[..5]), t).unwrap();
        assert_eq!(got.as_deref(), Some(&HELLO[..]));
        assert!(a.is_empty());
        assert_eq!(a.bytes(), 0);
        assert_eq!(a.stats().completed, 1);
    }

    #[test]
    fn the_longest_idle_partial_hello_goes_first() {
        let limits = AssemblerLimits {
            max_entries: 2,
            ..AssemblerLimits::default()
        };
        let mut a = HelloAssembler::new(limits);
        let t = Instant::now();
        let part = frame(0, &HELLO[..3]);
        a.push(b"old", &part, t).unwrap();
        a.push(b"mid", &part, t + Duration::from_millis(1)).unwrap();
        a.push(b"new", &part, t + Duration::from_millis(2)).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a.stats().evicted, 1);
        // "old" was dropped: its rest alone is not a ClientHello.
        let rest = frame(3, &HELLO[3..]);
        assert_eq!(
            a.push(b"old", &rest, t + Duration::from_millis(3)),
            Ok(None)
        );
        assert_eq!(
            a.push(b"new", &rest, t + Duration::from_millis(3))
                .unwrap()
                .as_deref(),
            Some(&HELLO[..])
        );
    }

    #[test]
    fn partial_hellos_expire() {
        let mut a = HelloAssembler::new(AssemblerLimits::default());
        let t = Instant::now();
        a.push(b"cid", &frame(0, &HELLO[..3]), t).unwrap();
        a.purge(t + Duration::from_secs(11));
        assert!(a.is_empty());
        assert_eq!(a.stats().expired, 1);
        assert_eq!(a.bytes(), 0);
    }

    #[test]
    fn a_hello_longer_than_the_bound_is_refused() {
        let mut s = CryptoStream::new(6);
        s.push(0, &HELLO[..4]).unwrap();
        assert!(matches!(
            s.client_hello(),
            Err(QuicError::TooLarge { len: 8, .. })
        ));
        assert!(s.push(4, &HELLO[4..]).is_err());
    }

    #[test]
    fn a_stream_not_starting_with_a_client_hello_is_refused() {
        let mut s = CryptoStream::new(64);
        s.push(0, &[2, 0, 0, 1, 0]).unwrap();
        assert_eq!(
            s.client_hello(),
            Err(QuicError::NotClientHello { found: 2 })
        );
    }
}
