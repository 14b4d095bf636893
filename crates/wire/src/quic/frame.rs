//! The frames of a decrypted Initial payload (RFC 9000 §19, Table 3).

use super::QuicError;
use super::header::read_varint;

/// A CRYPTO frame (RFC 9000 §19.6): bytes of the handshake stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CryptoFrame<'a> {
    /// The stream offset of `data`.
    pub offset: u64,
    /// The bytes.
    pub data: &'a [u8],
}

/// The CRYPTO frames of a decrypted Initial payload, in order; PADDING,
/// PING, ACK and CONNECTION_CLOSE are read and skipped, any other frame
/// type is malformed (an Initial may carry no other, RFC 9000 §12.4).
pub fn crypto_frames(payload: &[u8]) -> CryptoFrames<'_> {
    CryptoFrames {
        rest: payload,
        failed: false,
    }
}

/// The iterator [`crypto_frames`] returns.
#[derive(Clone, Debug)]
pub struct CryptoFrames<'a> {
    rest: &'a [u8],
    failed: bool,
}

/// The largest stream offset QUIC allows (RFC 9000 §19.6: 2^62 - 1).
const MAX_OFFSET: u64 = (1 << 62) - 1;

impl<'a> CryptoFrames<'a> {
    fn varint(&mut self, what: &'static str) -> Result<u64, QuicError> {
        let (v, n) = read_varint(self.rest).ok_or(QuicError::Malformed { what })?;
        self.rest = &self.rest[n..];
        Ok(v)
    }

    fn skip(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], QuicError> {
        let n = usize::try_from(n)
            .ok()
            .filter(|n| *n <= self.rest.len())
            .ok_or(QuicError::Malformed { what })?;
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    /// Reads frames until a CRYPTO frame or the end.
    fn advance(&mut self) -> Result<Option<CryptoFrame<'a>>, QuicError> {
        while let Some(&ty) = self.rest.first() {
            match ty {
                // PADDING: a run of zeros is one step.
                0x00 => {
                    let n = self.rest.iter().take_while(|b| **b == 0).count();
                    self.rest = &self.rest[n..];
                }
                // PING.
                0x01 => self.rest = &self.rest[1..],
                // ACK, ACK with ECN counts.
                0x02 | 0x03 => {
                    self.rest = &self.rest[1..];
                    let what = "ACK frame ends early";
                    self.varint(what)?; // largest acknowledged
                    self.varint(what)?; // ACK delay
                    let ranges = self.varint(what)?;
                    self.varint(what)?; // first range
                    for _ in 0..ranges {
                        if self.rest.is_empty() {
                            return Err(QuicError::Malformed { what });
                        }
                        self.varint(what)?; // gap
                        self.varint(what)?; // range length
                    }
                    if ty == 0x03 {
                        for _ in 0..3 {
                            self.varint(what)?;
                        }
                    }
                }
                // CRYPTO.
                0x06 => {
                    self.rest = &self.rest[1..];
                    let what = "CRYPTO frame ends early";
                    let offset = self.varint(what)?;
                    let len = self.varint(what)?;
                    if offset.saturating_add(len) > MAX_OFFSET {
                        return Err(QuicError::Malformed {
                            what: "CRYPTO frame past the largest stream offset",
                        });
                    }
                    let data = self.skip(len, "CRYPTO frame data runs past the payload")?;
                    return Ok(Some(CryptoFrame { offset, data }));
                }
                // CONNECTION_CLOSE (transport).
                0x1c => {
                    self.rest = &self.rest[1..];
                    let what = "CONNECTION_CLOSE frame ends early";
                    self.varint(what)?; // error code
                    self.varint(what)?; // frame type
                    let n = self.varint(what)?;
                    self.skip(n, what)?;
                }
                _ => {
                    return Err(QuicError::Malformed {
                        what: "a frame type an Initial packet may not carry",
                    });
                }
            }
        }
        Ok(None)
    }
}

impl<'a> Iterator for CryptoFrames<'a> {
    type Item = Result<CryptoFrame<'a>, QuicError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.advance() {
            Ok(f) => f.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crypto_frames_between_padding_ping_and_ack() {
        let mut p = vec![0x01, 0, 0, 0];
        // ACK: largest 5, delay 0, 1 range, first range 0, gap 1, len 0.
        p.extend([0x02, 5, 0, 1, 0, 1, 0]);
        p.extend([0x06, 0x00, 0x03, b'a', b'b', b'c']);
        p.extend([0x06, 0x03, 0x01, b'd', 0, 0]);
        let frames: Vec<_> = crypto_frames(&p).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            frames,
            [
                CryptoFrame {
                    offset: 0,
                    data: b"abc"
                },
                CryptoFrame {
                    offset: 3,
                    data: b"d"
                }
            ]
        );
    }

    #[test]
    fn stream_frames_are_refused_in_an_initial() {
        let r: Vec<_> = crypto_frames(&[0x08, 0, 0]).collect();
        assert!(matches!(r[..], [Err(QuicError::Malformed { .. })]));
        let r: Vec<_> = crypto_frames(&[0x06, 0, 9, 1]).collect();
        assert!(matches!(r[..], [Err(QuicError::Malformed { .. })]));
    }
}
