//! Writing a file set to a directory so that a stock web server serves it.
//!
//! Each file goes to `DIR` + its URL path (`/specweb96/class1_3` →
//! `DIR/specweb96/class1_3`), so nginx with `root DIR;` or Apache with
//! `DocumentRoot DIR` answers the same URLs as `tlslab serve`. Contents are
//! [`crate::file_bytes`] of the URL path, the bytes `tlslab serve
//! --fileset specweb96` holds in memory.

use std::io::Read as _;
use std::path::{Component, Path, PathBuf};

use crate::Error;

/// What to do with a file that exists with other contents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overwrite {
    /// Refuse with [`Error::Exists`] (files with the same contents are left
    /// as they are and reported as written).
    #[default]
    Refuse,
    /// Replace it.
    Replace,
}

/// Writes the SPECweb96 `files` under `dir` (created if missing) and returns
/// the paths written, in the order of `files`.
pub fn write(
    dir: &Path,
    files: &[crate::specweb96::File],
    overwrite: Overwrite,
) -> Result<Vec<PathBuf>, Error> {
    write_sized(
        dir,
        files.iter().map(|f| (f.path.as_str(), f.size as u64)),
        overwrite,
    )
}

/// The most bytes one generated file may hold: 1 GiB, what `tlslab serve`
/// loads at most.
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Writes one file per `(url_path, size)` under `dir`: `size` bytes of
/// [`crate::file_bytes`]`(url_path, size)` at [`relative_path`]`(url_path)`.
/// Used for the SPECweb96 set and for replaying a log from a file tree with
/// the sizes it recorded. Returns the paths written.
pub fn write_sized<'a>(
    dir: &Path,
    entries: impl IntoIterator<Item = (&'a str, u64)>,
    overwrite: Overwrite,
) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    for (url, size) in entries {
        if size > MAX_FILE_BYTES {
            return Err(Error::Invalid(format!(
                "{url}: {size} bytes is more than the {MAX_FILE_BYTES}-byte limit; serve it as /bytes/<N> instead"
            )));
        }
        let path = dir.join(relative_path(url)?);
        let want = crate::file_bytes(url, size as usize);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                action: "create directory",
                path: parent.to_path_buf(),
                source,
            })?;
        }
        if overwrite == Overwrite::Refuse && path.exists() {
            if same_contents(&path, &want)? {
                out.push(path);
                continue;
            }
            return Err(Error::Exists { path });
        }
        std::fs::write(&path, &want).map_err(|source| Error::Io {
            action: "write",
            path: path.clone(),
            source,
        })?;
        out.push(path);
    }
    Ok(out)
}

fn same_contents(path: &Path, want: &[u8]) -> Result<bool, Error> {
    let io = |source| Error::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() || meta.len() != want.len() as u64 {
        return Ok(false);
    }
    let mut have = Vec::with_capacity(want.len());
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut have))
        .map_err(io)?;
    Ok(have == want)
}

/// The relative file path a URL path maps to: the query (`?…`) is dropped,
/// a path ending in `/` maps to its `index.html` (as nginx and `tlslab
/// serve` do), and paths that are not plain (no leading `/`, `..`, `.`,
/// empty segments, NUL) are refused so a log cannot write outside `dir`.
/// Percent-escapes are kept verbatim.
pub fn relative_path(url: &str) -> Result<PathBuf, Error> {
    let bad = |why: &str| {
        Error::Invalid(format!(
            "URL path '{url}' {why}; only plain absolute paths like /a/b.html can become files"
        ))
    };
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let Some(rest) = path.strip_prefix('/') else {
        return Err(bad("does not start with '/'"));
    };
    if path.contains('\0') {
        return Err(bad("contains a NUL byte"));
    }
    let mut rel = PathBuf::new();
    let segments: Vec<&str> = rest.split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        if seg.is_empty() {
            if last {
                rel.push("index.html");
                continue;
            }
            return Err(bad("has an empty segment ('//')"));
        }
        if *seg == "." || *seg == ".." {
            return Err(bad("has a '.' or '..' segment"));
        }
        rel.push(seg);
    }
    // Belt and braces: nothing but plain names may remain.
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(bad("does not map to a plain relative path"));
    }
    Ok(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_specweb96_set_and_refuses_to_clobber() {
        let dir = tempfile::tempdir().unwrap();
        let files = crate::specweb96::files();
        let paths = write(dir.path(), &files, Overwrite::Refuse).unwrap();
        assert_eq!(paths.len(), 36);
        for (f, p) in files.iter().zip(&paths) {
            assert_eq!(p, &dir.path().join(&f.path[1..]));
            assert_eq!(std::fs::read(p).unwrap(), crate::specweb96::contents(f));
        }
        // Same contents again: fine.
        write(dir.path(), &files, Overwrite::Refuse).unwrap();
        // A differing file is refused unless asked.
        std::fs::write(&paths[3], b"other").unwrap();
        let e = write(dir.path(), &files, Overwrite::Refuse).unwrap_err();
        assert!(
            matches!(e, Error::Exists { ref path } if path == &paths[3]),
            "{e}"
        );
        assert!(e.to_string().contains("overwrite"));
        write(dir.path(), &files, Overwrite::Replace).unwrap();
        assert_eq!(
            std::fs::read(&paths[3]).unwrap(),
            crate::specweb96::contents(&files[3])
        );
    }

    #[test]
    fn url_paths_map_safely() {
        assert_eq!(
            relative_path("/a/b.gif?x=1").unwrap(),
            PathBuf::from("a/b.gif")
        );
        assert_eq!(relative_path("/").unwrap(), PathBuf::from("index.html"));
        assert_eq!(relative_path("/d/").unwrap(), PathBuf::from("d/index.html"));
        for bad in ["a", "/../etc/passwd", "/a/./b", "/a//b", "", "/a\0b"] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn write_sized_writes_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let p = write_sized(dir.path(), [("/x/y", 5000), ("/z", 0)], Overwrite::Refuse).unwrap();
        assert_eq!(std::fs::metadata(&p[0]).unwrap().len(), 5000);
        assert_eq!(std::fs::metadata(&p[1]).unwrap().len(), 0);
        assert!(write_sized(dir.path(), [("/../q", 1)], Overwrite::Refuse).is_err());
    }
}
