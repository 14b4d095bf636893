//! What the server answers: in-memory files and the built-in routes.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use crate::config::Content;
use crate::error::{Error, Result};
use tlslab_runtime::thread_cpu_time;

/// The most a `Content::Root` tree may hold: 1 GiB.
pub const MAX_ROOT_BYTES: u64 = 1 << 30;
/// The most CPU time one `/dyn` request may ask for: 10 s.
pub const DYN_MAX_WORK: Duration = Duration::from_secs(10);
/// The most bytes `/dyn` or `/bytes/<N>` may return: 1 GiB.
pub const DYN_MAX_BYTES: u64 = 1 << 30;

/// One chunk of filler, repeated for generated bodies.
const FILL_CHUNK: usize = 64 * 1024;
static FILL: [u8; FILL_CHUNK] = [b'x'; FILL_CHUNK];

/// A file held in memory.
#[derive(Clone, Debug)]
struct File {
    body: Bytes,
    content_type: &'static str,
}

/// The files the server holds, by URL path.
#[derive(Debug, Default)]
pub(crate) struct Files {
    files: HashMap<String, File>,
}

impl Files {
    /// Loads `content` into memory.
    pub(crate) fn load(content: &Content) -> Result<Files> {
        let mut files = HashMap::new();
        match content {
            Content::Empty => {}
            Content::Specweb96 => {
                for f in tlslab_workload::specweb96::files() {
                    let body = Bytes::from(tlslab_workload::specweb96::contents(&f));
                    files.insert(
                        f.path.clone(),
                        File {
                            body,
                            content_type: "application/octet-stream",
                        },
                    );
                }
            }
            Content::Root(dir) => {
                let meta = std::fs::metadata(dir).map_err(|e| Error::Content {
                    path: dir.clone(),
                    problem: format!("cannot read ({e}); give an existing directory"),
                })?;
                if !meta.is_dir() {
                    return Err(Error::Content {
                        path: dir.clone(),
                        problem: "not a directory; give the directory to serve".into(),
                    });
                }
                let mut total = 0u64;
                walk(dir, dir, &mut files, &mut total)?;
            }
        }
        Ok(Files { files })
    }

    /// How many files are held.
    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }

    fn get(&self, path: &str) -> Option<&File> {
        if path.ends_with('/') {
            self.files.get(&format!("{path}index.html"))
        } else {
            self.files.get(path)
        }
    }
}

fn walk(root: &Path, dir: &Path, files: &mut HashMap<String, File>, total: &mut u64) -> Result<()> {
    let err = |path: &Path, e: std::io::Error| Error::Content {
        path: path.to_path_buf(),
        problem: format!("cannot read ({e}); fix its permissions or serve another directory"),
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| err(dir, e))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| err(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let ft = entry.file_type().map_err(|e| err(&path, e))?;
        if ft.is_dir() {
            walk(root, &path, files, total)?;
            continue;
        }
        // Follow symbolic links to files, never to directories (no loops).
        let meta = std::fs::metadata(&path).map_err(|e| err(&path, e))?;
        if !meta.is_file() {
            continue;
        }
        *total += meta.len();
        if *total > MAX_ROOT_BYTES {
            return Err(Error::Content {
                path: root.to_path_buf(),
                problem: format!(
                    "the tree holds more than {} bytes (1 GiB), which tlslab loads into memory; serve a smaller directory",
                    MAX_ROOT_BYTES
                ),
            });
        }
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let mut url = String::new();
        let mut ok = true;
        for part in rel.components() {
            match part.as_os_str().to_str() {
                Some(s) => {
                    url.push('/');
                    url.push_str(s);
                }
                None => ok = false,
            }
        }
        if !ok {
            tracing::warn!(path = %path.display(), "skipping a file whose name is not UTF-8");
            continue;
        }
        let body = std::fs::read(&path).map_err(|e| err(&path, e))?;
        files.insert(
            url,
            File {
                body: Bytes::from(body),
                content_type: content_type(&path),
            },
        );
    }
    Ok(())
}

fn content_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "wasm" => "application/wasm",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// A response body: one buffer, or `remaining` filler bytes in chunks.
#[derive(Debug)]
pub(crate) enum Body {
    /// A whole body (`None` once sent).
    Full(Option<Bytes>),
    /// Generated filler.
    Fill {
        /// Bytes still to send.
        remaining: u64,
    },
}

impl Body {
    fn full(b: impl Into<Bytes>) -> Body {
        let b = b.into();
        if b.is_empty() {
            Body::Full(None)
        } else {
            Body::Full(Some(b))
        }
    }

    fn len(&self) -> u64 {
        match self {
            Body::Full(b) => b.as_ref().map_or(0, |b| b.len() as u64),
            Body::Fill { remaining } => *remaining,
        }
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Fill { remaining } => {
                if *remaining == 0 {
                    return Poll::Ready(None);
                }
                let n = (*remaining).min(FILL_CHUNK as u64) as usize;
                *remaining -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&FILL[..n])))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.len() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len())
    }
}

fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let len = body.len();
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

/// A response with a fixed body and content type.
pub(crate) fn plain(
    status: StatusCode,
    content_type: &'static str,
    body: String,
) -> Response<Body> {
    respond(status, content_type, Body::full(body))
}

fn text(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
    let mut m = msg.into();
    m.push('\n');
    respond(status, "text/plain; charset=utf-8", Body::full(m))
}

/// What [`handle`] made of a request.
#[derive(Debug)]
pub(crate) enum Handled {
    /// The response.
    Ready(Response<Body>),
    /// `/dyn` with CPU work: the caller runs [`dyn_response`] off the
    /// event loop.
    Burn {
        /// CPU time to burn.
        work: Duration,
        /// Filler bytes to return.
        bytes: u64,
    },
}

/// Answers one request.
pub(crate) fn handle<B>(req: &Request<B>, files: &Files) -> Handled {
    if req.uri().path() == "/dyn"
        && (req.method() == Method::GET || req.method() == Method::HEAD)
        && let Ok((work, bytes)) = parse_dyn(req.uri().query().unwrap_or(""))
        && !work.is_zero()
    {
        return Handled::Burn { work, bytes };
    }
    Handled::Ready(respond_to(req, files))
}

/// The response to a request that needs no CPU work.
fn respond_to<B>(req: &Request<B>, files: &Files) -> Response<Body> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET and HEAD are served",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let raw = req.uri().path();
    let path = match decode_path(raw) {
        Ok(p) => p,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    if path == "/health" {
        return text(StatusCode::OK, "ok");
    }
    if path == "/dyn" {
        return match parse_dyn(req.uri().query().unwrap_or("")) {
            Ok((work, bytes)) => dyn_response(work, bytes),
            Err(msg) => text(StatusCode::BAD_REQUEST, msg),
        };
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        return match parse_bytes(n) {
            Ok(n) => respond(
                StatusCode::OK,
                "application/octet-stream",
                Body::Fill { remaining: n },
            ),
            Err(msg) => text(StatusCode::BAD_REQUEST, msg),
        };
    }
    match files.get(&path) {
        Some(f) => respond(StatusCode::OK, f.content_type, Body::full(f.body.clone())),
        None => text(StatusCode::NOT_FOUND, format!("{path} not found")),
    }
}

/// Percent-decodes a request path and refuses anything that could climb
/// out of the served tree or is not clean UTF-8.
fn decode_path(raw: &str) -> std::result::Result<String, String> {
    if !raw.starts_with('/') {
        return Err("the request path must start with '/'".into());
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(b) => out.push(b),
                None => return Err("bad percent-encoding in the request path".into()),
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let path = String::from_utf8(out).map_err(|_| "the request path is not UTF-8".to_string())?;
    if path.contains('\0') || path.contains('\\') {
        return Err("the request path holds a NUL or a backslash".into());
    }
    if path.split('/').any(|seg| seg == "..") {
        return Err("'..' in the request path is refused (path traversal)".into());
    }
    Ok(path)
}

fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a byte count; use /bytes/<N> with N a whole number"))?;
    if n > DYN_MAX_BYTES {
        return Err(format!(
            "{n} bytes is over the limit of {DYN_MAX_BYTES} (1 GiB); ask for less"
        ));
    }
    Ok(n)
}

/// Parses `work=<µs>&bytes=<N>` (both optional, default 0).
fn parse_dyn(query: &str) -> std::result::Result<(Duration, u64), String> {
    let mut work = Duration::ZERO;
    let mut bytes = 0;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "work" => {
                let us: u64 = v.parse().map_err(|_| {
                    format!("work='{v}' is not a whole number of microseconds of CPU time")
                })?;
                work = Duration::from_micros(us);
                if work > DYN_MAX_WORK {
                    return Err(format!(
                        "work={us} µs is over the limit of {} µs (10 s); ask for less",
                        DYN_MAX_WORK.as_micros()
                    ));
                }
            }
            "bytes" => bytes = parse_bytes(v).map_err(|e| format!("bytes: {e}"))?,
            other => {
                return Err(format!(
                    "unknown parameter '{other}'; /dyn takes work=<µs of CPU> and bytes=<N>"
                ));
            }
        }
    }
    Ok((work, bytes))
}

/// Burns `work` of this thread's CPU time, then answers `bytes` filler
/// bytes. The CPU time actually burnt is in `x-tlslab-cpu-us`.
pub(crate) fn dyn_response(work: Duration, bytes: u64) -> Response<Body> {
    let burnt = burn_cpu(work);
    let mut r = respond(
        StatusCode::OK,
        "application/octet-stream",
        Body::Fill { remaining: bytes },
    );
    r.headers_mut().insert(
        "x-tlslab-cpu-us",
        HeaderValue::from(burnt.as_micros() as u64),
    );
    r
}

/// Busy-loops until the calling thread has used `work` more CPU time.
/// Returns the CPU time used.
pub(crate) fn burn_cpu(work: Duration) -> Duration {
    let start = thread_cpu_time();
    if work.is_zero() {
        return Duration::ZERO;
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    loop {
        // A few microseconds of arithmetic between clock reads, so the time
        // is mostly user time rather than clock syscalls.
        for _ in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
        let used = thread_cpu_time().saturating_sub(start);
        if used >= work {
            return used;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str, files: &Files) -> Response<Body> {
        let req = Request::get(path).body(()).unwrap();
        respond_to(&req, files)
    }

    #[test]
    fn paths_are_decoded_and_traversal_refused() {
        assert_eq!(decode_path("/a%20b").unwrap(), "/a b");
        assert!(decode_path("/../etc/passwd").is_err());
        assert!(decode_path("/a/%2e%2e/b").is_err());
        assert!(decode_path("/a/..").is_err());
        assert!(decode_path("/a%2").is_err());
        assert!(decode_path("/a%00").is_err());
        assert!(decode_path("/a%5c..%5cb").is_err());
        assert_eq!(decode_path("/a..b/").unwrap(), "/a..b/");
    }

    #[test]
    fn dyn_params_are_checked() {
        assert_eq!(parse_dyn("").unwrap(), (Duration::ZERO, 0));
        assert_eq!(
            parse_dyn("work=150&bytes=10").unwrap(),
            (Duration::from_micros(150), 10)
        );
        assert!(parse_dyn("work=abc").is_err());
        assert!(parse_dyn("work=10000001").is_err());
        assert!(parse_dyn("bytes=1073741825").is_err());
        assert!(parse_dyn("bytes=-1").is_err());
        assert!(
            parse_dyn("wrok=1")
                .unwrap_err()
                .contains("unknown parameter")
        );
        let r = get("/dyn?work=x", &Files::default());
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn burn_cpu_burns_at_least_the_request() {
        let before = thread_cpu_time();
        let used = burn_cpu(Duration::from_millis(20));
        let measured = thread_cpu_time() - before;
        assert!(used >= Duration::from_millis(20), "{used:?}");
        assert!(measured >= Duration::from_millis(20), "{measured:?}");
        assert!(measured < Duration::from_millis(200), "{measured:?}");
    }

    #[test]
    fn fill_bodies_have_exact_sizes() {
        let r = get("/bytes/200000", &Files::default());
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::CONTENT_LENGTH], "200000");
        assert_eq!(r.body().size_hint().exact(), Some(200_000));
        assert_eq!(get("/bytes/0", &Files::default()).body().len(), 0);
        assert_eq!(
            get("/bytes/x", &Files::default()).status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn methods_other_than_get_and_head_are_refused() {
        let req = Request::post("/health").body(()).unwrap();
        let r = respond_to(&req, &Files::default());
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[header::ALLOW], "GET, HEAD");
    }

    #[test]
    fn specweb96_is_loaded() {
        let f = Files::load(&Content::Specweb96).unwrap();
        assert_eq!(f.len(), 36);
        let r = get("/specweb96/class3_8", &f);
        assert_eq!(r.body().len(), 921_600);
        assert_eq!(
            get("/specweb96/class4_0", &f).status(),
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn root_is_loaded_with_index_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "<h1>hi</h1>").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a.css"), "a{}").unwrap();
        std::fs::write(dir.path().join("sub/index.html"), "sub").unwrap();
        let f = Files::load(&Content::Root(dir.path().to_path_buf())).unwrap();
        assert_eq!(f.len(), 3);
        let r = get("/", &f);
        assert_eq!(r.body().len(), 11);
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(get("/sub/", &f).body().len(), 3);
        assert_eq!(
            get("/sub/a.css", &f).headers()[header::CONTENT_TYPE],
            "text/css; charset=utf-8"
        );
        assert_eq!(
            get("/sub/../index.html", &f).status(),
            StatusCode::BAD_REQUEST
        );
        let missing = Files::load(&Content::Root(dir.path().join("nope"))).unwrap_err();
        assert!(missing.to_string().contains("nope"), "{missing}");
        let file = Files::load(&Content::Root(dir.path().join("index.html"))).unwrap_err();
        assert!(file.to_string().contains("not a directory"), "{file}");
    }

    #[test]
    fn root_over_one_gib_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // A sparse file: no disk space used, but its length counts.
        let f = std::fs::File::create(dir.path().join("big.bin")).unwrap();
        f.set_len(MAX_ROOT_BYTES + 1).unwrap();
        let err = Files::load(&Content::Root(dir.path().to_path_buf()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("1 GiB"), "{err}");
    }
}
