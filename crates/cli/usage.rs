//! The usage error (exit code 2) and how an error becomes an exit code.
//! A leaf: it imports nothing from the other files of the binary.

use std::process::ExitCode;

/// A usage error: bad flags or bad files named by flags. Exit code 2.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Wraps any displayable error as a usage error.
pub fn usage(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Usage(e.to_string()))
}

/// Returns a usage error.
pub fn bail<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(anyhow::Error::new(Usage(msg.into())))
}

/// The exit code of a failed command: 0 for a closed stdout (`| head`),
/// 2 for a usage error, 1 for any other failure (printed first).
pub fn exit_code(err: &anyhow::Error) -> ExitCode {
    let broken_pipe = err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return ExitCode::SUCCESS;
    }
    eprintln!("tlslab: {err:#}");
    if err.downcast_ref::<Usage>().is_some() {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}
