//! Counting a response body as it streams, by its framing
//! (Content-Length, chunked, or until the server closes), holding none of
//! it: the probe's GET reads through a fixed buffer and keeps only this
//! count.

use crate::failed::Failed;

/// Counts a response body as it streams, by its framing, holding none of
/// it.
pub(crate) struct Body {
    framing: Framing,
    /// Body bytes so far (chunked: decoded).
    pub(crate) bytes: u64,
    chunked: Chunked,
}

/// Where a chunked body is (RFC 9112 section 7.1).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Chunked {
    /// In a chunk-size line: the size so far, whether a digit was seen,
    /// whether in an extension.
    Size(u64, bool, bool),
    /// After the size line's CR.
    SizeLf(u64),
    /// In a chunk's data: bytes left.
    Data(u64),
    /// After a chunk's data, before its CR.
    DataCr,
    /// After that CR.
    DataLf,
    /// In the trailer section: the current line's length.
    Trailer(usize),
    /// After a trailer line's CR.
    TrailerLf(usize),
    /// After the last chunk and its trailers.
    Done,
}

impl Body {
    pub(crate) fn new(framing: Framing) -> Self {
        Body {
            framing,
            bytes: 0,
            chunked: Chunked::Size(0, false, false),
        }
    }

    /// Counts `data`; true once the body is complete.
    pub(crate) fn feed(&mut self, data: &[u8]) -> Result<bool, Failed> {
        match self.framing {
            Framing::Length(len) => {
                let len = len as u64;
                self.bytes = (self.bytes + data.len() as u64).min(len);
                Ok(self.bytes >= len)
            }
            Framing::Close => {
                self.bytes += data.len() as u64;
                Ok(false)
            }
            Framing::Chunked => self.feed_chunked(data),
        }
    }

    fn feed_chunked(&mut self, mut data: &[u8]) -> Result<bool, Failed> {
        let bad = |what: &str| Failed("http_protocol".into(), format!("bad chunked body: {what}"));
        while let Some(&b) = data.first() {
            let mut used = 1;
            self.chunked = match self.chunked {
                Chunked::Size(v, digit, ext) => match b {
                    b'\r' => Chunked::SizeLf(v),
                    b'\n' if digit => self.after_size(v),
                    _ if ext => Chunked::Size(v, digit, true),
                    b';' | b' ' | b'\t' if digit => Chunked::Size(v, digit, true),
                    _ => {
                        let d = char::from(b)
                            .to_digit(16)
                            .ok_or_else(|| bad("a chunk size is not hex"))?;
                        let v = v
                            .checked_mul(16)
                            .and_then(|v| v.checked_add(u64::from(d)))
                            .ok_or_else(|| bad("a chunk size overflows"))?;
                        Chunked::Size(v, true, false)
                    }
                },
                Chunked::SizeLf(v) => match b {
                    b'\n' => self.after_size(v),
                    _ => return Err(bad("no LF after a chunk size")),
                },
                Chunked::Data(left) => {
                    let k = (data.len() as u64).min(left);
                    used = k as usize;
                    self.bytes += k;
                    if left == k {
                        Chunked::DataCr
                    } else {
                        Chunked::Data(left - k)
                    }
                }
                Chunked::DataCr => match b {
                    b'\r' => Chunked::DataLf,
                    b'\n' => Chunked::Size(0, false, false),
                    _ => return Err(bad("no CRLF after a chunk's data")),
                },
                Chunked::DataLf => match b {
                    b'\n' => Chunked::Size(0, false, false),
                    _ => return Err(bad("no LF after a chunk's data")),
                },
                Chunked::Trailer(len) => match b {
                    b'\r' => Chunked::TrailerLf(len),
                    b'\n' if len == 0 => Chunked::Done,
                    b'\n' => Chunked::Trailer(0),
                    _ => Chunked::Trailer(len + 1),
                },
                Chunked::TrailerLf(len) => match b {
                    b'\n' if len == 0 => Chunked::Done,
                    b'\n' => Chunked::Trailer(0),
                    _ => return Err(bad("no LF after a trailer line")),
                },
                Chunked::Done => return Ok(true),
            };
            data = &data[used..];
        }
        Ok(self.chunked == Chunked::Done)
    }

    fn after_size(&self, v: u64) -> Chunked {
        if v == 0 {
            Chunked::Trailer(0)
        } else {
            Chunked::Data(v)
        }
    }
}

/// How a response body ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Framing {
    /// After this many bytes.
    Length(usize),
    /// After the last chunk and its trailers.
    Chunked,
    /// When the server closes.
    Close,
}
