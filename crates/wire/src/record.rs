//! The TLS record layer (RFC 8446 §5.1, RFC 5246 §6.2).

use crate::Error;
use crate::reader::Reader;

/// Length of a TLS record header: type (1), version (2), length (2).
pub const RECORD_HEADER_LEN: usize = 5;
/// Largest plaintext record payload TLS allows (2^14).
pub const MAX_PLAINTEXT_LEN: usize = 1 << 14;
/// Largest protected record payload TLS 1.2 allows (2^14 + 2048).
pub const MAX_CIPHERTEXT_LEN: usize = MAX_PLAINTEXT_LEN + 2048;

/// A record content type (RFC 8446 §5.1). Unknown values are kept as is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentType(pub u8);

impl ContentType {
    /// `change_cipher_spec` (20).
    pub const CHANGE_CIPHER_SPEC: ContentType = ContentType(20);
    /// `alert` (21).
    pub const ALERT: ContentType = ContentType(21);
    /// `handshake` (22).
    pub const HANDSHAKE: ContentType = ContentType(22);
    /// `application_data` (23).
    pub const APPLICATION_DATA: ContentType = ContentType(23);
    /// `heartbeat` (24, RFC 6520).
    pub const HEARTBEAT: ContentType = ContentType(24);
}

impl ContentType {
    /// The RFC name, or `None` for values TLS does not define.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            20 => "change_cipher_spec",
            21 => "alert",
            22 => "handshake",
            23 => "application_data",
            24 => "heartbeat",
            _ => return None,
        })
    }
}

debug_by_name!(ContentType);

/// A record header: the first five bytes of every TLS record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordHeader {
    /// What the payload holds.
    pub content_type: ContentType,
    /// The legacy record version (`0x0301` or `0x0303` in practice).
    pub version: u16,
    /// Payload length in bytes (at most [`MAX_CIPHERTEXT_LEN`]).
    pub length: u16,
}

impl RecordHeader {
    /// Header plus payload length.
    pub fn record_len(&self) -> usize {
        RECORD_HEADER_LEN + usize::from(self.length)
    }
}

/// Parses the record header at the start of `buf`.
///
/// Fails with [`Error::Incomplete`] when fewer than five bytes are given,
/// [`Error::Malformed`] when the content type is not one TLS defines or the
/// version is not `0x03xx`, and [`Error::TooLarge`] when the length exceeds
/// [`MAX_CIPHERTEXT_LEN`].
pub fn parse_record_header(buf: &[u8]) -> Result<RecordHeader, Error> {
    // Judge the bytes that are there before asking for more, so garbage is
    // rejected as early as possible.
    if let Some(&t) = buf.first()
        && ContentType(t).name().is_none()
    {
        return Err(Error::Malformed {
            what: "record content type is not one TLS defines (20..=24)",
        });
    }
    if buf.get(1).is_some_and(|&major| major != 3) {
        return Err(Error::Malformed {
            what: "record version is not 0x03xx",
        });
    }
    let Some(hdr) = buf.get(..RECORD_HEADER_LEN) else {
        return Err(Error::Incomplete {
            needed: RECORD_HEADER_LEN - buf.len(),
        });
    };
    let mut r = Reader::outer(hdr);
    let content_type = ContentType(r.u8()?);
    let version = r.u16()?;
    let length = r.u16()?;
    if usize::from(length) > MAX_CIPHERTEXT_LEN {
        return Err(Error::TooLarge {
            what: "TLS record",
            len: usize::from(length),
            max: MAX_CIPHERTEXT_LEN,
        });
    }
    Ok(RecordHeader {
        content_type,
        version,
        length,
    })
}

/// One complete record borrowed from a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The record header.
    pub header: RecordHeader,
    /// The payload (possibly encrypted), `header.length` bytes.
    pub payload: &'a [u8],
}

/// Parses the complete record at the start of `buf`, returning it and the
/// number of bytes it occupies. [`Error::Incomplete`] says how many more
/// bytes the record needs.
pub fn parse_record(buf: &[u8]) -> Result<(Record<'_>, usize), Error> {
    let header = parse_record_header(buf)?;
    let mut r = Reader::outer(buf);
    r.take(RECORD_HEADER_LEN)?;
    let payload = r.take(usize::from(header.length))?;
    Ok((Record { header, payload }, header.record_len()))
}

/// Iterates over the complete records at the start of `buf`.
///
/// Iteration stops at the first incomplete record; [`Records::remainder`]
/// then holds the bytes to keep until more arrive. A malformed header is
/// yielded once as an error and ends the iteration.
pub fn records(buf: &[u8]) -> Records<'_> {
    Records {
        buf,
        consumed: 0,
        failed: false,
    }
}

/// Iterator returned by [`records`].
#[derive(Clone, Debug)]
pub struct Records<'a> {
    buf: &'a [u8],
    consumed: usize,
    failed: bool,
}

impl<'a> Records<'a> {
    /// The bytes not yet yielded as records: an incomplete record, or
    /// everything from a malformed header on.
    pub fn remainder(&self) -> &'a [u8] {
        self.buf.get(self.consumed..).unwrap_or_default()
    }

    /// How many bytes the yielded records occupy.
    pub fn consumed(&self) -> usize {
        self.consumed
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match parse_record(self.remainder()) {
            Ok((rec, n)) => {
                self.consumed += n;
                Some(Ok(rec))
            }
            Err(Error::Incomplete { .. }) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for Records<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_errors() {
        let h = parse_record_header(&[23, 3, 3, 0x01, 0x02]).unwrap();
        assert_eq!(h.content_type, ContentType::APPLICATION_DATA);
        assert_eq!(h.version, 0x0303);
        assert_eq!(h.length, 0x0102);
        assert_eq!(h.record_len(), 5 + 0x0102);
        for n in 0..5 {
            assert_eq!(
                parse_record_header(&[23, 3, 3, 1, 2][..n]),
                Err(Error::Incomplete { needed: 5 - n })
            );
        }
        assert!(matches!(
            parse_record_header(&[99, 3, 3, 0, 1]),
            Err(Error::Malformed { .. })
        ));
        assert!(matches!(
            parse_record_header(&[22, 2, 0, 0, 1]),
            Err(Error::Malformed { .. })
        ));
        assert!(matches!(
            parse_record_header(&[23, 3, 3, 0xff, 0xff]),
            Err(Error::TooLarge { len: 0xffff, .. })
        ));
    }

    #[test]
    fn iterates_complete_records_and_keeps_remainder() {
        let mut buf = vec![22, 3, 1, 0, 2, 0xaa, 0xbb];
        buf.extend_from_slice(&[20, 3, 3, 0, 1, 1]);
        buf.extend_from_slice(&[23, 3, 3, 0, 4, 1, 2]);
        let mut it = records(&buf);
        let a = it.next().unwrap().unwrap();
        assert_eq!(a.header.content_type, ContentType::HANDSHAKE);
        assert_eq!(a.payload, &[0xaa, 0xbb]);
        let b = it.next().unwrap().unwrap();
        assert_eq!(b.header.content_type, ContentType::CHANGE_CIPHER_SPEC);
        assert!(it.next().is_none());
        assert_eq!(it.consumed(), 13);
        assert_eq!(it.remainder(), &[23, 3, 3, 0, 4, 1, 2]);
        assert_eq!(
            parse_record(it.remainder()).unwrap_err(),
            Error::Incomplete { needed: 2 }
        );
    }

    #[test]
    fn malformed_header_is_yielded_once() {
        let buf = [22, 3, 1, 0, 1, 0, 0x00, 0, 0, 0, 0];
        let mut it = records(&buf);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
        assert_eq!(it.remainder().len(), 5);
    }
}
