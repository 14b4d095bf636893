//! Bounded reads of the files users name on the command line: access logs,
//! workload configurations, client lists, ticket-key files, and the JSON
//! inputs of `tlslab report` and `tlslab merge`.
//!
//! A file named by a flag may be anything: `/dev/zero`, a binary, a log of
//! hundreds of gigabytes with no newline. Every reader here has a bound,
//! so such a file ends in a clear error instead of growing memory until
//! the OOM killer runs:
//! - [`read_capped`] and [`read_capped_to_string`] read a whole file of at
//!   most `max` bytes (through `take()`), else fail with
//!   [`std::io::ErrorKind::FileTooLarge`] naming the bound;
//! - [`read_line_capped`] reads one line of at most `max` bytes; a longer
//!   line is skipped to its end (not kept) and reported as
//!   [`Line::TooLong`], and a line with no end within `max_discard` bytes
//!   is an error, so an endless line (`/dev/zero`) stops too.

use std::io::{self, BufRead, Read};
use std::path::Path;

/// The longest line a line-oriented input (an access log) may have: 64 KiB.
/// Real access-log lines are a few hundred bytes; Apache caps a request
/// line at 8 KiB by default.
pub const MAX_LINE: usize = 64 * 1024;

/// How far an over-long line is skipped looking for its end before the
/// input is given up as not text: 16 MiB.
pub const MAX_DISCARD: u64 = 16 * 1024 * 1024;

/// The largest configuration file read whole (TOML configurations,
/// client lists, ticket-key files): 16 MiB.
pub const MAX_CONFIG_FILE: u64 = 16 * 1024 * 1024;

/// The largest JSON input read whole (`tlslab report` inputs, `tlslab
/// merge`'s agent files, `plan --costs`): 64 MiB, about 45 times the
/// largest results document in docs/results.
pub const MAX_JSON_FILE: u64 = 64 * 1024 * 1024;

/// `n` bytes for people: `64 KiB`, `16 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["bytes", "KiB", "MiB", "GiB"];
    let mut v = n;
    let mut unit = 0;
    while v >= 1024 && v.is_multiple_of(1024) && unit + 1 < UNITS.len() {
        v /= 1024;
        unit += 1;
    }
    format!("{v} {}", UNITS[unit])
}

/// The error of a file above `max` bytes.
pub fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!(
            "it is larger than {}, the most tlslab reads from such a file; is it the right file?",
            human_bytes(max)
        ),
    )
}

/// Reads the whole file at `path`, which must hold at most `max` bytes
/// (else an [`io::ErrorKind::FileTooLarge`] error, after reading at most
/// `max + 1` bytes).
pub fn read_capped(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let mut buf = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(too_large(max));
    }
    Ok(buf)
}

/// Like [`read_capped`], for UTF-8 text (else an
/// [`io::ErrorKind::InvalidData`] error).
pub fn read_capped_to_string(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_capped(path, max)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it is not UTF-8 text (byte {}); give a text file",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// What [`read_line_capped`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// The input ended; nothing was read.
    Eof,
    /// A line (with its `\n`, unless it was the last) is in the buffer.
    Complete,
    /// The line was longer than the bound: it was skipped to its end and
    /// the buffer is empty. `len` is its length in bytes, newline excluded.
    TooLong {
        /// The line's length in bytes.
        len: u64,
    },
}

/// Reads one line of at most `max` bytes (newline excluded) into `buf`
/// (cleared first). A longer line is consumed to its end without being
/// kept, and [`Line::TooLong`] says how long it was. A line with no end
/// within `max_discard` bytes is an [`io::ErrorKind::InvalidData`] error:
/// the input is not text.
pub fn read_line_capped<R: BufRead + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
    max_discard: u64,
) -> io::Result<Line> {
    buf.clear();
    // One byte beyond `max` leaves room for the newline of a line of
    // exactly `max` bytes.
    let limit = max as u64 + 1;
    let n = (&mut *r).take(limit).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(Line::Eof);
    }
    if buf.last() == Some(&b'\n') || (n as u64) < limit {
        return Ok(Line::Complete);
    }
    // Over-long: skip to the end of the line without keeping it.
    let mut len = n as u64;
    buf.clear();
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(Line::TooLong { len });
        }
        let (used, ended) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        r.consume(used);
        len += used as u64 - u64::from(ended);
        if ended {
            return Ok(Line::TooLong { len });
        }
        if len > max_discard {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a line is longer than {} with no end: this is not a text file",
                    human_bytes(max_discard)
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize, discard: u64) -> Vec<io::Result<(Line, Vec<u8>)>> {
        let mut r = io::BufReader::with_capacity(7, input);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            match read_line_capped(&mut r, &mut buf, max, discard) {
                Ok(Line::Eof) => return out,
                Ok(l) => out.push(Ok((l, buf.clone()))),
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
        }
    }

    #[test]
    fn short_lines_pass_and_long_ones_are_skipped_to_their_end() {
        let got = lines(b"abc\n0123456789\nxy\n01234\nlast", 5, 100);
        let got: Vec<(Line, Vec<u8>)> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            vec![
                (Line::Complete, b"abc\n".to_vec()),
                (Line::TooLong { len: 10 }, vec![]),
                (Line::Complete, b"xy\n".to_vec()),
                // Exactly `max` bytes plus the newline fits.
                (Line::Complete, b"01234\n".to_vec()),
                (Line::Complete, b"last".to_vec()),
            ]
        );
        // An over-long last line without a newline.
        let got = lines(b"ok\n0123456789", 5, 100);
        assert_eq!(got[1].as_ref().unwrap().0, Line::TooLong { len: 10 });
    }

    #[test]
    fn an_endless_line_is_an_error_not_unbounded_memory() {
        // An endless line: what /dev/zero gives.
        let mut zero = io::BufReader::new(io::repeat(0));
        let mut buf = Vec::new();
        let err = read_line_capped(&mut zero, &mut buf, MAX_LINE, 1 << 20).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("1 MiB"), "{err}");
        assert!(buf.capacity() <= 2 * MAX_LINE, "{}", buf.capacity());
    }

    #[test]
    fn whole_file_reads_are_capped() {
        let dir = std::env::temp_dir().join(format!("tlslab-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_capped(&p, 10).unwrap(), b"0123456789");
        let err = read_capped(&p, 9).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert!(err.to_string().contains("9 bytes"), "{err}");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        let err = read_capped_to_string(&p, 10).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        // /dev/zero: a capped read stops at the cap.
        let err = read_capped(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("1 MiB"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn sizes_read_for_people() {
        assert_eq!(human_bytes(MAX_LINE as u64), "64 KiB");
        assert_eq!(human_bytes(MAX_DISCARD), "16 MiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }
}
