//! Validated, borrowed TLS vectors that iterate without allocating.

use std::marker::PhantomData;

use crate::Error;

/// An element of a TLS vector, as it is encoded inside the vector.
pub trait ListItem<'a>: Sized {
    /// Reads one element from the front of `buf`, advancing it; `None` if
    /// the bytes do not hold a well-formed element.
    fn read(buf: &mut &'a [u8]) -> Option<Self>;
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if buf.len() < n {
        return None;
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Some(head)
}

fn u16_of(buf: &mut &[u8]) -> Option<u16> {
    let b = take(buf, 2)?;
    Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
}

impl<'a> ListItem<'a> for u8 {
    fn read(buf: &mut &'a [u8]) -> Option<Self> {
        take(buf, 1)?.first().copied()
    }
}

impl<'a> ListItem<'a> for u16 {
    fn read(buf: &mut &'a [u8]) -> Option<Self> {
        u16_of(buf)
    }
}

/// `opaque x<1..2^8-1>`: ALPN protocol names and PSK binders.
impl<'a> ListItem<'a> for &'a [u8] {
    fn read(buf: &mut &'a [u8]) -> Option<Self> {
        let n = *take(buf, 1)?.first()?;
        if n == 0 {
            return None;
        }
        take(buf, usize::from(n))
    }
}

/// One `KeyShareEntry` offered in a ClientHello (RFC 8446 §4.2.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyShareEntry<'a> {
    /// The named group (e.g. `0x001d` x25519, `0x11ec` X25519MLKEM768).
    pub group: u16,
    /// The public key share.
    pub key_exchange: &'a [u8],
}

impl<'a> ListItem<'a> for KeyShareEntry<'a> {
    fn read(buf: &mut &'a [u8]) -> Option<Self> {
        let group = u16_of(buf)?;
        let n = u16_of(buf)?;
        if n == 0 {
            return None;
        }
        let key_exchange = take(buf, usize::from(n))?;
        Some(KeyShareEntry {
            group,
            key_exchange,
        })
    }
}

/// One `PskIdentity` offered in a ClientHello (RFC 8446 §4.2.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PskIdentity<'a> {
    /// The identity: for resumption, the ticket the server issued.
    pub identity: &'a [u8],
    /// The ticket age in milliseconds plus the ticket's `ticket_age_add`.
    pub obfuscated_ticket_age: u32,
}

impl<'a> ListItem<'a> for PskIdentity<'a> {
    fn read(buf: &mut &'a [u8]) -> Option<Self> {
        let n = u16_of(buf)?;
        if n == 0 {
            return None;
        }
        let identity = take(buf, usize::from(n))?;
        let age = take(buf, 4)?;
        Some(PskIdentity {
            identity,
            obfuscated_ticket_age: u32::from_be_bytes(age.try_into().ok()?),
        })
    }
}

/// A TLS vector whose elements were all checked when it was built, so
/// iterating it cannot fail.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct List<'a, T> {
    bytes: &'a [u8],
    _item: PhantomData<fn() -> T>,
}

/// A list of 16-bit code points (cipher suites, groups, versions, ...).
pub type U16List<'a> = List<'a, u16>;

impl<'a, T: ListItem<'a>> List<'a, T> {
    /// Checks that `bytes` (the vector contents, without its length prefix)
    /// is a sequence of well-formed elements, at least `min` of them.
    pub(crate) fn new(bytes: &'a [u8], min: usize, what: &'static str) -> Result<Self, Error> {
        let mut rest = bytes;
        let mut n = 0usize;
        while !rest.is_empty() {
            T::read(&mut rest).ok_or(Error::Malformed { what })?;
            n += 1;
        }
        if n < min {
            return Err(Error::Malformed { what });
        }
        Ok(List {
            bytes,
            _item: PhantomData,
        })
    }

    /// The vector contents as sent, without the length prefix.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The elements in wire order.
    pub fn iter(&self) -> ListIter<'a, T> {
        ListIter {
            rest: self.bytes,
            _item: PhantomData,
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether the list has no elements.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl<'a, T: ListItem<'a> + PartialEq> List<'a, T> {
    /// Whether `item` is in the list.
    pub fn contains(&self, item: &T) -> bool {
        self.iter().any(|x| x == *item)
    }
}

impl<'a, T: ListItem<'a> + std::fmt::Debug> std::fmt::Debug for List<'a, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a, T: ListItem<'a>> IntoIterator for List<'a, T> {
    type Item = T;
    type IntoIter = ListIter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over a [`List`].
#[derive(Clone, Debug)]
pub struct ListIter<'a, T> {
    rest: &'a [u8],
    _item: PhantomData<fn() -> T>,
}

impl<'a, T: ListItem<'a>> Iterator for ListIter<'a, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        T::read(&mut self.rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u16_lists() {
        let l = U16List::new(&[0, 1, 0x13, 0x02], 1, "x").unwrap();
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![1, 0x1302]);
        assert_eq!(l.len(), 2);
        assert!(l.contains(&0x1302));
        assert!(U16List::new(&[0, 1, 0x13], 0, "x").is_err());
        assert!(U16List::new(&[], 1, "x").is_err());
        assert!(U16List::new(&[], 0, "x").unwrap().is_empty());
    }

    #[test]
    fn opaque8_lists() {
        let l = List::<&[u8]>::new(b"\x02h2\x08http/1.1", 1, "alpn").unwrap();
        assert_eq!(l.iter().collect::<Vec<_>>(), vec![&b"h2"[..], b"http/1.1"]);
        assert!(List::<&[u8]>::new(b"\x00", 1, "alpn").is_err());
        assert!(List::<&[u8]>::new(b"\x03h2", 1, "alpn").is_err());
    }
}
