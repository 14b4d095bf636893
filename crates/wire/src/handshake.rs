//! Handshake messages (RFC 8446 §4): the four-byte message header, iterating
//! over messages in a buffer, and reassembling messages that span records.

use std::borrow::Cow;

use crate::Error;
use crate::reader::Reader;
use crate::record::{ContentType, MAX_PLAINTEXT_LEN, RECORD_HEADER_LEN, parse_record};

/// Length of a handshake message header: type (1), length (3).
pub const HANDSHAKE_HEADER_LEN: usize = 4;
/// The default bound on one handshake message body (64 KiB).
pub const DEFAULT_MAX_MESSAGE_LEN: usize = 64 * 1024;

/// A handshake message type. Unknown values are kept as is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandshakeType(pub u8);

impl HandshakeType {
    /// `hello_request` (0, TLS 1.2).
    pub const HELLO_REQUEST: HandshakeType = HandshakeType(0);
    /// `client_hello` (1).
    pub const CLIENT_HELLO: HandshakeType = HandshakeType(1);
    /// `server_hello` (2), also HelloRetryRequest in TLS 1.3.
    pub const SERVER_HELLO: HandshakeType = HandshakeType(2);
    /// `hello_verify_request` (3, DTLS).
    pub const HELLO_VERIFY_REQUEST: HandshakeType = HandshakeType(3);
    /// `new_session_ticket` (4).
    pub const NEW_SESSION_TICKET: HandshakeType = HandshakeType(4);
    /// `end_of_early_data` (5).
    pub const END_OF_EARLY_DATA: HandshakeType = HandshakeType(5);
    /// `encrypted_extensions` (8).
    pub const ENCRYPTED_EXTENSIONS: HandshakeType = HandshakeType(8);
    /// `certificate` (11).
    pub const CERTIFICATE: HandshakeType = HandshakeType(11);
    /// `server_key_exchange` (12, TLS 1.2).
    pub const SERVER_KEY_EXCHANGE: HandshakeType = HandshakeType(12);
    /// `certificate_request` (13).
    pub const CERTIFICATE_REQUEST: HandshakeType = HandshakeType(13);
    /// `server_hello_done` (14, TLS 1.2).
    pub const SERVER_HELLO_DONE: HandshakeType = HandshakeType(14);
    /// `certificate_verify` (15).
    pub const CERTIFICATE_VERIFY: HandshakeType = HandshakeType(15);
    /// `client_key_exchange` (16, TLS 1.2).
    pub const CLIENT_KEY_EXCHANGE: HandshakeType = HandshakeType(16);
    /// `finished` (20).
    pub const FINISHED: HandshakeType = HandshakeType(20);
    /// `certificate_status` (22, OCSP stapling in TLS 1.2).
    pub const CERTIFICATE_STATUS: HandshakeType = HandshakeType(22);
    /// `key_update` (24).
    pub const KEY_UPDATE: HandshakeType = HandshakeType(24);
    /// `compressed_certificate` (25, RFC 8879).
    pub const COMPRESSED_CERTIFICATE: HandshakeType = HandshakeType(25);
    /// `message_hash` (254, transcript only).
    pub const MESSAGE_HASH: HandshakeType = HandshakeType(254);

    /// The RFC name, or `None` for values this crate does not know.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "hello_request",
            1 => "client_hello",
            2 => "server_hello",
            3 => "hello_verify_request",
            4 => "new_session_ticket",
            5 => "end_of_early_data",
            8 => "encrypted_extensions",
            11 => "certificate",
            12 => "server_key_exchange",
            13 => "certificate_request",
            14 => "server_hello_done",
            15 => "certificate_verify",
            16 => "client_key_exchange",
            20 => "finished",
            22 => "certificate_status",
            24 => "key_update",
            25 => "compressed_certificate",
            254 => "message_hash",
            _ => return None,
        })
    }
}

debug_by_name!(HandshakeType);

/// A handshake message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandshakeHeader {
    /// The message type.
    pub msg_type: HandshakeType,
    /// Body length in bytes (24-bit on the wire).
    pub length: u32,
}

impl HandshakeHeader {
    /// Header plus body length.
    pub fn message_len(&self) -> usize {
        HANDSHAKE_HEADER_LEN + self.length as usize
    }
}

/// Parses the handshake message header at the start of `buf`
/// ([`Error::Incomplete`] with fewer than four bytes).
pub fn parse_handshake_header(buf: &[u8]) -> Result<HandshakeHeader, Error> {
    let Some(hdr) = buf.get(..HANDSHAKE_HEADER_LEN) else {
        return Err(Error::Incomplete {
            needed: HANDSHAKE_HEADER_LEN - buf.len(),
        });
    };
    let mut r = Reader::outer(hdr);
    let msg_type = HandshakeType(r.u8()?);
    let length = r.u24()?;
    Ok(HandshakeHeader { msg_type, length })
}

/// One complete handshake message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeMessage<'a> {
    /// The message type.
    pub msg_type: HandshakeType,
    /// The body, without the four-byte header.
    pub body: &'a [u8],
}

impl HandshakeMessage<'_> {
    /// Encoded length including the header.
    pub fn encoded_len(&self) -> usize {
        HANDSHAKE_HEADER_LEN + self.body.len()
    }
}

/// Parses the complete handshake message at the start of `buf`; bytes after
/// it are ignored. [`Error::Incomplete`] says how many more bytes it needs.
pub fn parse_handshake(buf: &[u8]) -> Result<HandshakeMessage<'_>, Error> {
    let hdr = parse_handshake_header(buf)?;
    let mut r = Reader::outer(buf);
    r.take(HANDSHAKE_HEADER_LEN)?;
    let body = r.take(hdr.length as usize)?;
    Ok(HandshakeMessage {
        msg_type: hdr.msg_type,
        body,
    })
}

/// Iterates over the complete handshake messages in `buf` (for example one
/// record payload). Iteration stops at an incomplete message, whose bytes
/// [`HandshakeMessages::remainder`] returns; use [`Reassembler`] when
/// messages span records.
pub fn handshake_messages(buf: &[u8]) -> HandshakeMessages<'_> {
    HandshakeMessages { buf }
}

/// Iterator returned by [`handshake_messages`].
#[derive(Clone, Debug)]
pub struct HandshakeMessages<'a> {
    buf: &'a [u8],
}

impl<'a> HandshakeMessages<'a> {
    /// The bytes after the messages yielded so far.
    pub fn remainder(&self) -> &'a [u8] {
        self.buf
    }
}

impl<'a> Iterator for HandshakeMessages<'a> {
    type Item = HandshakeMessage<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        let msg = parse_handshake(self.buf).ok()?;
        self.buf = self.buf.get(msg.encoded_len()..).unwrap_or_default();
        Some(msg)
    }
}

impl std::iter::FusedIterator for HandshakeMessages<'_> {}

/// Reassembles handshake messages from the payloads of consecutive
/// handshake records, whatever the record boundaries.
///
/// Memory is bounded: a message whose header declares a body longer than
/// the limit fails with [`Error::TooLarge`] as soon as its header is seen,
/// and as long as the caller drains [`Reassembler::next_message`] until it
/// returns `Ok(None)` after each [`Reassembler::push`], the buffer holds at
/// most one partial message plus one record payload.
#[derive(Clone, Debug)]
pub struct Reassembler {
    buf: Vec<u8>,
    start: usize,
    max_message: usize,
}

impl Default for Reassembler {
    fn default() -> Self {
        Self::new()
    }
}

impl Reassembler {
    /// A reassembler with the [`DEFAULT_MAX_MESSAGE_LEN`] limit.
    pub fn new() -> Self {
        Self::with_max_message(DEFAULT_MAX_MESSAGE_LEN)
    }

    /// A reassembler that rejects message bodies longer than `max` bytes.
    pub fn with_max_message(max: usize) -> Self {
        Reassembler {
            buf: Vec::new(),
            start: 0,
            max_message: max,
        }
    }

    /// The most bytes the buffer may hold after a push.
    fn backlog_limit(&self) -> usize {
        self.max_message
            .saturating_add(HANDSHAKE_HEADER_LEN)
            .saturating_add(MAX_PLAINTEXT_LEN)
    }

    /// Bytes received but not yet returned as messages.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether no partial message is pending (a record boundary may fall
    /// here; TLS 1.3 requires one before a key change).
    pub fn is_empty(&self) -> bool {
        self.buffered() == 0
    }

    /// Appends the payload of one handshake record.
    ///
    /// Fails with [`Error::TooLarge`] when the payload exceeds the TLS
    /// plaintext limit or the pending message exceeds the message limit,
    /// and with [`Error::Backlog`] when earlier messages were not drained.
    /// After an error the reassembler should be discarded.
    pub fn push(&mut self, payload: &[u8]) -> Result<(), Error> {
        if payload.len() > MAX_PLAINTEXT_LEN {
            return Err(Error::TooLarge {
                what: "handshake record payload",
                len: payload.len(),
                max: MAX_PLAINTEXT_LEN,
            });
        }
        self.buf.drain(..self.start);
        self.start = 0;
        let buffered = self.buf.len() + payload.len();
        if buffered > self.backlog_limit() {
            return Err(Error::Backlog {
                buffered,
                limit: self.backlog_limit(),
            });
        }
        self.buf.extend_from_slice(payload);
        self.check_head()
    }

    fn check_head(&self) -> Result<(), Error> {
        let pending = self.buf.get(self.start..).unwrap_or_default();
        if let Ok(h) = parse_handshake_header(pending)
            && h.length as usize > self.max_message
        {
            return Err(Error::TooLarge {
                what: "handshake message",
                len: h.length as usize,
                max: self.max_message,
            });
        }
        Ok(())
    }

    /// The next complete message, or `Ok(None)` when more records are needed.
    pub fn next_message(&mut self) -> Result<Option<HandshakeMessage<'_>>, Error> {
        self.check_head()?;
        let pending = self.buf.get(self.start..).unwrap_or_default();
        match parse_handshake(pending) {
            Ok(msg) => {
                self.start += msg.encoded_len();
                Ok(Some(msg))
            }
            Err(Error::Incomplete { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Bytes of the message started in `a` followed by `b` not yet present
/// (0 while its header is incomplete).
fn message_remaining(a: &[u8], b: &[u8]) -> usize {
    let mut hdr = [0u8; HANDSHAKE_HEADER_LEN];
    let mut n = 0;
    for (dst, src) in hdr.iter_mut().zip(a.iter().chain(b)) {
        *dst = *src;
        n += 1;
    }
    match parse_handshake_header(&hdr[..n]) {
        Ok(h) => h.message_len().saturating_sub(a.len() + b.len()),
        Err(_) => 0,
    }
}

/// Returns the first handshake message carried by the handshake records at
/// the start of `buf` (the peeked start of a connection), header included,
/// so it can be passed to [`crate::ClientHello::parse`].
///
/// The message is borrowed when it lies within one record and copied when it
/// spans several. Fails with [`Error::Incomplete`] (a lower bound on the
/// bytes still needed) until the whole message has arrived, with
/// [`Error::UnexpectedRecord`] if a non-handshake record comes first, and
/// with [`Error::TooLarge`] if the message body exceeds `max_message`.
pub fn first_handshake_message(buf: &[u8], max_message: usize) -> Result<Cow<'_, [u8]>, Error> {
    let mut rest = buf;
    let mut joined: Option<Vec<u8>> = None;
    loop {
        let (rec, n) = match parse_record(rest) {
            Ok(ok) => ok,
            Err(Error::Incomplete { needed }) => {
                // The rest of the message may need more than the rest of
                // this record; report the larger lower bound.
                let partial = rest.get(RECORD_HEADER_LEN..).unwrap_or_default();
                let have = joined.as_deref().unwrap_or_default();
                return Err(Error::Incomplete {
                    needed: needed.max(message_remaining(have, partial)),
                });
            }
            Err(e) => return Err(e),
        };
        if rec.header.content_type != ContentType::HANDSHAKE {
            return Err(Error::UnexpectedRecord {
                found: rec.header.content_type.0,
            });
        }
        if rec.payload.is_empty() {
            return Err(Error::Malformed {
                what: "empty handshake record",
            });
        }
        rest = rest.get(n..).unwrap_or_default();
        let acc: &[u8] = match &mut joined {
            None => rec.payload,
            Some(v) => {
                v.extend_from_slice(rec.payload);
                v
            }
        };
        if let Ok(h) = parse_handshake_header(acc)
            && h.length as usize > max_message
        {
            return Err(Error::TooLarge {
                what: "handshake message",
                len: h.length as usize,
                max: max_message,
            });
        }
        match parse_handshake(acc) {
            Ok(msg) => {
                let len = msg.encoded_len();
                return Ok(match joined {
                    None => Cow::Borrowed(rec.payload.get(..len).unwrap_or_default()),
                    Some(mut v) => {
                        v.truncate(len);
                        Cow::Owned(v)
                    }
                });
            }
            Err(Error::Incomplete { .. }) => {
                if joined.is_none() {
                    joined = Some(rec.payload.to_vec());
                }
                if rest.is_empty() {
                    let have = joined.as_deref().unwrap_or_default();
                    let more = parse_handshake_header(have)
                        .map(|h| h.message_len().saturating_sub(have.len()))
                        .unwrap_or(HANDSHAKE_HEADER_LEN - have.len().min(HANDSHAKE_HEADER_LEN));
                    // The rest of the message needs at least one more record header.
                    return Err(Error::Incomplete {
                        needed: more + RECORD_HEADER_LEN,
                    });
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(t: u8, body: &[u8]) -> Vec<u8> {
        let n = body.len() as u32;
        let mut v = vec![t, (n >> 16) as u8, (n >> 8) as u8, n as u8];
        v.extend_from_slice(body);
        v
    }

    fn record(payload: &[u8]) -> Vec<u8> {
        let n = payload.len() as u16;
        let mut v = vec![22, 3, 3, (n >> 8) as u8, n as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn iterates_messages_in_a_payload() {
        let mut buf = msg(2, &[1, 2, 3]);
        buf.extend(msg(14, &[]));
        buf.extend(&msg(11, &[9; 10])[..6]);
        let mut it = handshake_messages(&buf);
        let a = it.next().unwrap();
        assert_eq!(a.msg_type, HandshakeType::SERVER_HELLO);
        assert_eq!(a.body, &[1, 2, 3]);
        assert_eq!(
            it.next().unwrap().msg_type,
            HandshakeType::SERVER_HELLO_DONE
        );
        assert!(it.next().is_none());
        assert_eq!(it.remainder().len(), 6);
        assert_eq!(
            parse_handshake(it.remainder()),
            Err(Error::Incomplete { needed: 8 })
        );
    }

    #[test]
    fn reassembles_across_any_split() {
        let mut stream = msg(2, &[7; 300]);
        stream.extend(msg(11, &[8; 1000]));
        stream.extend(msg(14, &[]));
        for chunk in [1, 2, 3, 4, 5, 7, 64, 299, 1500] {
            let mut r = Reassembler::new();
            let mut got = Vec::new();
            for part in stream.chunks(chunk) {
                r.push(part).unwrap();
                while let Some(m) = r.next_message().unwrap() {
                    got.push((m.msg_type, m.body.to_vec()));
                }
            }
            assert!(r.is_empty(), "chunk {chunk}");
            assert_eq!(got.len(), 3, "chunk {chunk}");
            assert_eq!(got[0], (HandshakeType::SERVER_HELLO, vec![7; 300]));
            assert_eq!(got[1], (HandshakeType::CERTIFICATE, vec![8; 1000]));
            assert_eq!(got[2], (HandshakeType::SERVER_HELLO_DONE, vec![]));
        }
    }

    #[test]
    fn reassembler_rejects_huge_messages_early() {
        let mut r = Reassembler::with_max_message(1000);
        assert_eq!(
            r.push(&[11, 0, 0x03, 0xe9]),
            Err(Error::TooLarge {
                what: "handshake message",
                len: 1001,
                max: 1000
            })
        );
        let mut r = Reassembler::new();
        assert!(matches!(r.push(&[11, 0xff, 0xff]), Ok(())));
        assert!(matches!(r.push(&[0xff]), Err(Error::TooLarge { .. })));
        assert!(matches!(
            r.push(&vec![0; MAX_PLAINTEXT_LEN + 1]),
            Err(Error::TooLarge { .. })
        ));
    }

    #[test]
    fn reassembler_refuses_an_undrained_backlog() {
        let mut r = Reassembler::with_max_message(10);
        let one = msg(20, &[1; 10]);
        let payload: Vec<u8> = one.iter().cycle().take(14 * 1000).copied().collect();
        r.push(&payload).unwrap();
        assert!(matches!(r.push(&payload), Err(Error::Backlog { .. })));
        let mut r = Reassembler::with_max_message(10);
        r.push(&payload).unwrap();
        let mut n = 0;
        while r.next_message().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 1000);
        r.push(&payload).unwrap();
    }

    #[test]
    fn first_message_borrowed_or_joined() {
        let m = msg(1, &[5; 100]);
        let one = record(&m);
        let got = first_handshake_message(&one, DEFAULT_MAX_MESSAGE_LEN).unwrap();
        assert!(matches!(got, Cow::Borrowed(_)));
        assert_eq!(&*got, &m[..]);

        let mut split = record(&m[..3]);
        split.extend(record(&m[3..50]));
        split.extend(record(&m[50..]));
        split.extend([23, 3, 3, 0, 1, 0]);
        let got = first_handshake_message(&split, DEFAULT_MAX_MESSAGE_LEN).unwrap();
        assert!(matches!(got, Cow::Owned(_)));
        assert_eq!(&*got, &m[..]);
        let end = split.len() - 6;
        for n in 0..end {
            match first_handshake_message(&split[..n], DEFAULT_MAX_MESSAGE_LEN) {
                Err(Error::Incomplete { needed }) => {
                    assert!(
                        needed >= 1 && needed <= end - n,
                        "prefix {n}: needed {needed}"
                    )
                }
                other => panic!("prefix {n}: {other:?}"),
            }
        }
    }

    #[test]
    fn first_message_errors() {
        assert_eq!(
            first_handshake_message(&[21, 3, 3, 0, 2, 2, 40], 100),
            Err(Error::UnexpectedRecord { found: 21 })
        );
        assert!(matches!(
            first_handshake_message(&record(&[1, 0, 1, 0]), 100),
            Err(Error::TooLarge { len: 256, .. })
        ));
        assert!(matches!(
            first_handshake_message(&[22, 3, 3, 0, 0], 100),
            Err(Error::Malformed { .. })
        ));
    }
}
