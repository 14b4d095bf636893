//! A bounds-checked cursor over a byte slice. Every read that would run
//! past the end returns an error instead of panicking.

use crate::Error;

/// How running out of bytes is reported: at the top level of a buffer the
/// caller may still receive more (`Incomplete`), inside a length-delimited
/// structure the data is simply wrong (`Malformed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Short {
    Incomplete,
    Malformed(&'static str),
}

#[derive(Clone, Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    short: Short,
}

impl<'a> Reader<'a> {
    /// A reader whose short reads are malformed `what`.
    pub(crate) fn inner(buf: &'a [u8], what: &'static str) -> Self {
        Reader {
            buf,
            short: Short::Malformed(what),
        }
    }

    /// A reader whose short reads mean more bytes are needed.
    pub(crate) fn outer(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            short: Short::Incomplete,
        }
    }

    fn short(&self, want: usize) -> Error {
        match self.short {
            Short::Incomplete => Error::Incomplete {
                needed: want - self.buf.len(),
            },
            Short::Malformed(what) => Error::Malformed { what },
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.buf.len() < n {
            return Err(self.short(n));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<&'a [u8; N], Error> {
        let s = self.take(N)?;
        s.try_into().map_err(|_| Error::Malformed {
            what: "internal length mismatch",
        })
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(*self.array::<2>()?))
    }

    pub(crate) fn u24(&mut self) -> Result<u32, Error> {
        let b = self.array::<3>()?;
        Ok(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(*self.array::<4>()?))
    }

    /// `opaque x<0..2^8-1>`.
    pub(crate) fn vec8(&mut self) -> Result<&'a [u8], Error> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    /// `opaque x<0..2^16-1>`.
    pub(crate) fn vec16(&mut self) -> Result<&'a [u8], Error> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }

    /// Fails with `what` unless every byte was consumed.
    pub(crate) fn finish(&self, what: &'static str) -> Result<(), Error> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Error::Malformed { what })
        }
    }
}
