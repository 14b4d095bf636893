//! Counting records and handshake messages in one direction of a TLS byte
//! stream, fed in arbitrary chunks, without buffering payloads.

use crate::Error;
use crate::handshake::{HANDSHAKE_HEADER_LEN, HandshakeType};
use crate::record::{ContentType, RECORD_HEADER_LEN, RecordHeader, parse_record_header};

/// Message types below this value are counted individually.
const COUNTED_TYPES: usize = 32;
/// Bytes of a handshake record after a ChangeCipherSpec examined to decide
/// whether it is a plaintext hello (see [`Tap`]).
const PEEK_LEN: usize = 6;

/// Moves bytes from the front of `data` into the header `buf`, of which
/// `len` are filled; true once it is full.
fn fill<const N: usize>(buf: &mut [u8; N], len: &mut usize, data: &mut &[u8]) -> bool {
    let n = (N - *len).min(data.len());
    let (head, tail) = data.split_at(n);
    if let Some(dst) = buf.get_mut(*len..*len + n) {
        dst.copy_from_slice(head);
    }
    *len += n;
    *data = tail;
    *len == N
}

/// What a [`Tap`] has seen so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TapStats {
    /// Records whose header was read.
    pub records: u64,
    /// Bytes of those records, headers included.
    pub record_bytes: u64,
    /// Handshake records (plaintext or protected).
    pub handshake_records: u64,
    /// Handshake records after a ChangeCipherSpec that hold protected data
    /// (the TLS 1.2 Finished); their messages cannot be counted.
    pub protected_handshake_records: u64,
    /// ChangeCipherSpec records.
    pub change_cipher_spec_records: u64,
    /// Alert records.
    pub alert_records: u64,
    /// Application-data records (in TLS 1.3 these include the encrypted
    /// handshake).
    pub application_data_records: u64,
    /// Heartbeat records.
    pub other_records: u64,
    /// Complete plaintext handshake messages.
    pub handshake_messages: u64,
    by_type: [u64; COUNTED_TYPES],
}

impl TapStats {
    /// Complete plaintext handshake messages of type `t`. Types from 32 up
    /// are not counted individually and return 0.
    pub fn messages_of(&self, t: HandshakeType) -> u64 {
        self.by_type.get(usize::from(t.0)).copied().unwrap_or(0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Payload is not parsed.
    Skip,
    /// Payload holds plaintext handshake messages.
    Plain,
    /// A handshake record after ChangeCipherSpec: collecting its first bytes.
    Deciding,
}

/// Follows one direction of a TLS connection and counts records and the
/// plaintext handshake messages in them, whatever the chunking of the
/// bytes fed (memory use is constant).
///
/// Handshake records before a ChangeCipherSpec are plaintext. After one,
/// a handshake record is protected (the TLS 1.2 Finished) unless it starts
/// with a ClientHello or ServerHello header followed by version `0x0303`:
/// in TLS 1.3 a client sends its second ClientHello, and a server its
/// ServerHello, after the compatibility ChangeCipherSpec that follows a
/// HelloRetryRequest. (Protected bytes match that 6-byte pattern with
/// probability about 2^-40.) TLS 1.3 encrypted handshake messages travel in
/// application-data records and are counted only as records.
#[derive(Clone, Debug)]
pub struct Tap {
    hdr: [u8; RECORD_HEADER_LEN],
    hdr_len: usize,
    remaining: usize,
    mode: Mode,
    peek: [u8; PEEK_LEN],
    peek_len: usize,
    after_ccs: bool,
    msg_hdr: [u8; HANDSHAKE_HEADER_LEN],
    msg_hdr_len: usize,
    msg_remaining: usize,
    failed: Option<Error>,
    stats: TapStats,
}

impl Default for Tap {
    fn default() -> Self {
        Self::new()
    }
}

impl Tap {
    /// A tap at the start of a stream.
    pub fn new() -> Self {
        Tap {
            hdr: [0; RECORD_HEADER_LEN],
            hdr_len: 0,
            remaining: 0,
            mode: Mode::Skip,
            peek: [0; PEEK_LEN],
            peek_len: 0,
            after_ccs: false,
            msg_hdr: [0; HANDSHAKE_HEADER_LEN],
            msg_hdr_len: 0,
            msg_remaining: 0,
            failed: None,
            stats: TapStats::default(),
        }
    }

    /// The counts so far.
    pub fn stats(&self) -> &TapStats {
        &self.stats
    }

    /// Whether a ChangeCipherSpec record has been seen.
    pub fn saw_change_cipher_spec(&self) -> bool {
        self.after_ccs
    }

    /// Whether the stream is between records (not inside a header or payload).
    pub fn at_record_boundary(&self) -> bool {
        self.hdr_len == 0
    }

    /// Feeds the next bytes of the stream.
    ///
    /// Fails with [`Error::Malformed`] or [`Error::TooLarge`] when the bytes
    /// are not a TLS record stream; the tap then stays failed and returns
    /// the same error for every later call.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), Error> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let r = self.feed_inner(data);
        if let Err(e) = r {
            self.failed = Some(e);
        }
        r
    }

    fn feed_inner(&mut self, mut data: &[u8]) -> Result<(), Error> {
        while !data.is_empty() {
            if self.hdr_len < RECORD_HEADER_LEN {
                if fill(&mut self.hdr, &mut self.hdr_len, &mut data) {
                    let h = parse_record_header(&self.hdr)?;
                    self.start_record(h)?;
                    if self.remaining == 0 {
                        self.end_record()?;
                    }
                }
                continue;
            }
            let n = self.remaining.min(data.len());
            let (chunk, tail) = data.split_at(n);
            data = tail;
            self.remaining -= n;
            self.payload(chunk)?;
            if self.remaining == 0 {
                self.end_record()?;
            }
        }
        Ok(())
    }

    fn in_message(&self) -> bool {
        self.msg_hdr_len != 0
    }

    fn start_record(&mut self, h: RecordHeader) -> Result<(), Error> {
        let s = &mut self.stats;
        s.records += 1;
        s.record_bytes += h.record_len() as u64;
        self.remaining = usize::from(h.length);
        self.mode = Mode::Skip;
        match h.content_type {
            ContentType::HANDSHAKE => {
                s.handshake_records += 1;
                if h.length == 0 {
                    return Err(Error::Malformed {
                        what: "empty handshake record",
                    });
                }
                self.mode = if self.after_ccs && !self.in_message() {
                    self.peek_len = 0;
                    Mode::Deciding
                } else {
                    Mode::Plain
                };
                return Ok(());
            }
            ContentType::CHANGE_CIPHER_SPEC => {
                s.change_cipher_spec_records += 1;
                self.after_ccs = true;
            }
            ContentType::ALERT => s.alert_records += 1,
            ContentType::APPLICATION_DATA => s.application_data_records += 1,
            _ => s.other_records += 1,
        }
        if self.in_message() {
            return Err(Error::Malformed {
                what: "a handshake message is interleaved with another record type",
            });
        }
        Ok(())
    }

    fn end_record(&mut self) -> Result<(), Error> {
        if self.mode == Mode::Deciding {
            self.decide();
        }
        self.hdr_len = 0;
        self.mode = Mode::Skip;
        Ok(())
    }

    fn payload(&mut self, mut chunk: &[u8]) -> Result<(), Error> {
        if self.mode == Mode::Deciding {
            let n = (PEEK_LEN - self.peek_len).min(chunk.len());
            let (head, tail) = chunk.split_at(n);
            if let Some(dst) = self.peek.get_mut(self.peek_len..self.peek_len + n) {
                dst.copy_from_slice(head);
            }
            self.peek_len += n;
            chunk = tail;
            if self.peek_len < PEEK_LEN {
                return Ok(());
            }
            self.decide();
        }
        if self.mode == Mode::Plain {
            self.messages(chunk);
        }
        Ok(())
    }

    fn decide(&mut self) {
        let p = self.peek;
        let hello = matches!(p, [1 | 2, 0, _, _, 3, 3]) && self.peek_len == PEEK_LEN;
        if hello {
            self.mode = Mode::Plain;
            self.messages(&p);
        } else {
            self.mode = Mode::Skip;
            self.stats.protected_handshake_records += 1;
        }
    }

    fn messages(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if self.msg_hdr_len < HANDSHAKE_HEADER_LEN {
                if fill(&mut self.msg_hdr, &mut self.msg_hdr_len, &mut chunk) {
                    let [_, a, b, c] = self.msg_hdr;
                    self.msg_remaining = u32::from_be_bytes([0, a, b, c]) as usize;
                    if self.msg_remaining == 0 {
                        self.message_done();
                    }
                }
                continue;
            }
            let n = self.msg_remaining.min(chunk.len());
            chunk = chunk.get(n..).unwrap_or_default();
            self.msg_remaining -= n;
            if self.msg_remaining == 0 {
                self.message_done();
            }
        }
    }

    fn message_done(&mut self) {
        let t = usize::from(self.msg_hdr[0]);
        self.stats.handshake_messages += 1;
        if let Some(c) = self.stats.by_type.get_mut(t) {
            *c += 1;
        }
        self.msg_hdr_len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(t: u8, payload: &[u8]) -> Vec<u8> {
        let n = payload.len() as u16;
        let mut v = vec![t, 3, 3, (n >> 8) as u8, n as u8];
        v.extend_from_slice(payload);
        v
    }

    fn msg(t: u8, body: &[u8]) -> Vec<u8> {
        let n = body.len() as u32;
        let mut v = vec![t, (n >> 16) as u8, (n >> 8) as u8, n as u8];
        v.extend_from_slice(body);
        v
    }

    /// A TLS 1.2 server flight: SH + Certificate split over two records,
    /// SHD, then NST, CCS, encrypted Finished, application data.
    fn tls12_server() -> Vec<u8> {
        let mut sh = msg(2, &[3, 3, 1, 2, 3]);
        sh.extend(msg(11, &[0; 3000]));
        sh.extend(msg(14, &[]));
        let mut s = record(22, &sh[..1000]);
        s.extend(record(22, &sh[1000..]));
        s.extend(record(22, &msg(4, &[0, 0, 0, 9, 0, 2, 1, 2])));
        s.extend(record(20, &[1]));
        s.extend(record(22, &[0x55; 40]));
        s.extend(record(23, &[0x66; 100]));
        s
    }

    #[test]
    fn counts_a_tls12_flight_under_any_chunking() {
        let s = tls12_server();
        let mut reference = None;
        for chunk in [1, 2, 3, 5, 6, 7, 100, s.len()] {
            let mut tap = Tap::new();
            for c in s.chunks(chunk) {
                tap.feed(c).unwrap();
            }
            assert!(tap.at_record_boundary());
            let st = tap.stats().clone();
            assert_eq!(st.records, 6);
            assert_eq!(st.record_bytes, s.len() as u64);
            assert_eq!(st.handshake_records, 4);
            assert_eq!(st.protected_handshake_records, 1);
            assert_eq!(st.change_cipher_spec_records, 1);
            assert_eq!(st.application_data_records, 1);
            assert_eq!(st.handshake_messages, 4);
            assert_eq!(st.messages_of(HandshakeType::CERTIFICATE), 1);
            assert_eq!(st.messages_of(HandshakeType::NEW_SESSION_TICKET), 1);
            assert_eq!(st.messages_of(HandshakeType::FINISHED), 0);
            assert_eq!(*reference.get_or_insert(st.clone()), st);
        }
    }

    #[test]
    fn plaintext_hello_after_compat_ccs_is_counted() {
        // TLS 1.3 client after a HelloRetryRequest: CH, CCS, CH2, encrypted.
        let mut s = record(22, &msg(1, &[3, 3, 0, 0]));
        s.extend(record(20, &[1]));
        s.extend(record(22, &msg(1, &[3, 3, 7, 7, 7])));
        s.extend(record(23, &[0; 50]));
        let mut tap = Tap::new();
        tap.feed(&s).unwrap();
        assert_eq!(tap.stats().messages_of(HandshakeType::CLIENT_HELLO), 2);
        assert_eq!(tap.stats().protected_handshake_records, 0);
        assert!(tap.saw_change_cipher_spec());
    }

    #[test]
    fn errors_stick() {
        let mut tap = Tap::new();
        assert!(tap.feed(&[22, 3, 3, 0, 0]).is_err());
        assert!(tap.feed(&record(23, &[1])).is_err());
        let mut tap = Tap::new();
        let mut s = record(22, &msg(11, &[0; 10])[..6]);
        s.extend(record(21, &[2, 40]));
        assert!(matches!(tap.feed(&s), Err(Error::Malformed { .. })));
        let mut tap = Tap::new();
        assert!(matches!(
            tap.feed(b"GET / HTTP/1.1"),
            Err(Error::Malformed { .. })
        ));
    }
}
