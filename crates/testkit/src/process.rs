//! Running a command with a time limit and its output captured, and a
//! child process killed on drop: the pieces every suite that starts a
//! process uses. A child that outlives its limit is killed and the test
//! fails with everything it printed.

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

pub use tlslab_peers::{Finished, wait_for_port, wait_timeout};

use crate::poll;

/// Reads a pipe to the end on a thread; returns what it read when joined.
fn drain<R: Read + Send + 'static>(mut r: R) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Runs `cmd` with stdin closed and its output captured; kills it and fails
/// the test if it runs longer than `limit`.
pub fn run(cmd: Command, limit: Duration) -> Output {
    run_fed(cmd, None, limit)
}

/// Like [`run`], but feeds `input` on stdin and then closes it.
pub fn run_with_input(cmd: Command, input: &[u8], limit: Duration) -> Output {
    run_fed(cmd, Some(input), limit)
}

fn run_fed(mut cmd: Command, input: Option<&[u8]>, limit: Duration) -> Output {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let feeder = child.stdin.take().zip(input).map(|(mut stdin, input)| {
        let input = input.to_vec();
        // Dropping stdin closes it.
        std::thread::spawn(move || drop(stdin.write_all(&input)))
    });
    let out = drain(child.stdout.take().expect("stdout is piped"));
    let err = drain(child.stderr.take().expect("stderr is piped"));
    let status = wait_timeout(&mut child, limit);
    if let Some(f) = feeder {
        let _ = f.join();
    }
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let status = status.unwrap_or_else(|| {
        panic!(
            "{shown} did not finish within {limit:?}\n--- stdout\n{}\n--- stderr\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )
    });
    Output {
        status,
        stdout,
        stderr,
    }
}

/// The words of `line`, split at whitespace: literal flags written the way
/// they are typed (`args("-c 1 -n 3")`). A path, or any value that may hold
/// a space, goes as its own item (see [`argv`]), never through this.
pub fn args(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `head` as given (URLs, paths), then the words of `line` ([`args`]).
pub fn argv<'a>(head: &[&'a str], line: &'a str) -> Vec<&'a str> {
    [head, &args(line)].concat()
}

/// [`args`] with each word that is a name in `vars` replaced by its value,
/// after the split (so a value may hold spaces):
/// `args_with("load URL -n 1", &[("URL", &url)])`.
pub fn args_with<'a>(line: &'a str, vars: &[(&str, &'a str)]) -> Vec<&'a str> {
    let value = |w| vars.iter().find(|(k, _)| *k == w).map_or(w, |(_, v)| *v);
    line.split_whitespace().map(value).collect()
}

/// Formats a command's output for assertion messages.
pub fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts a command exited 0 and returns its stdout.
pub fn expect_ok(out: &Output) -> String {
    assert!(out.status.success(), "command failed: {}", show(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails the test if a process's stderr shows a Rust panic.
pub fn assert_no_panic(stderr: &[u8]) {
    let s = String::from_utf8_lossy(stderr);
    assert!(
        !s.contains("panicked") && !s.contains("RUST_BACKTRACE"),
        "the process panicked:\n{s}"
    );
}

/// A child process (tlslab-peers' [`tlslab_peers::Proc`]: its own process
/// group, killed on drop) with its stdout lines collected; a start failure
/// fails the test.
pub struct Proc(tlslab_peers::Proc);

impl Proc {
    /// Spawns `cmd` with stdin closed, stdout collected as lines and
    /// stderr in a temporary file.
    pub fn spawn(cmd: Command) -> Proc {
        let shown = format!("{cmd:?}");
        Proc(tlslab_peers::Proc::spawn_lines(cmd, &shown).unwrap_or_else(|e| panic!("{e}")))
    }

    /// See [`tlslab_peers::Proc::graceful_drop`].
    pub fn graceful_drop(self) -> Proc {
        Proc(self.0.graceful_drop())
    }

    /// See [`tlslab_peers::Proc::wait`].
    pub fn wait(self, limit: Duration) -> Finished {
        self.0.wait(limit)
    }

    /// See [`tlslab_peers::Proc::terminate`].
    pub fn terminate(self, limit: Duration) -> Finished {
        self.0.terminate(limit)
    }

    /// See [`tlslab_peers::Proc::kill`].
    pub fn kill(self) -> Finished {
        self.0.kill()
    }

    /// Everything on stderr so far.
    pub fn stderr_text(&self) -> String {
        self.0.log_text()
    }

    /// Polls stderr (≤ `limit`) until it contains `needle`; whether it did.
    pub fn stderr_shows(&self, needle: &str, limit: Duration) -> bool {
        poll(limit, || self.stderr_text(), |t| t.contains(needle)).contains(needle)
    }
}

impl std::ops::Deref for Proc {
    type Target = tlslab_peers::Proc;
    fn deref(&self) -> &tlslab_peers::Proc {
        &self.0
    }
}

impl std::ops::DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut tlslab_peers::Proc {
        &mut self.0
    }
}
