//! One error type for the library. The CLI maps it to an exit code:
//! mistakes in what the user asked for are usage errors (exit 2), everything
//! that goes wrong while carrying out a valid request is a runtime error (exit 1).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A problem file or option that cannot be read or parsed.
    #[error("{0}")]
    Parse(String),

    /// A field whose value lies outside what the solver accepts.
    #[error("{field} = {value}: {why}")]
    InvalidField {
        field: String,
        value: String,
        why: String,
    },

    /// The CUDA backend was requested (or needed) but cannot be used.
    #[error("no CUDA device: {0}")]
    NoCudaDevice(String),

    #[error("CUDA: {0}")]
    Cuda(String),

    #[error("kernel compilation failed for {kernel}: {log}")]
    KernelCompile { kernel: String, log: String },

    #[error("not enough memory: {0}")]
    OutOfMemory(String),

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    /// A run that produced a non-finite value; the data is not trustworthy.
    #[error("{0}")]
    Diverged(String),

    /// A request larger than this machine (or the device budget) can ever hold.
    #[error("{0}")]
    TooLarge(String),

    /// No pyramid task fits the device budget at the requested height.
    #[error("{0}")]
    DoesNotFit(String),

    /// SIGINT or SIGTERM stopped the run; `message` says what was kept.
    #[error("{message}")]
    Interrupted { signal: i32, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn invalid(field: &str, value: impl std::fmt::Display, why: impl Into<String>) -> Self {
        Error::InvalidField {
            field: field.to_string(),
            value: shown(value.to_string()),
            why: why.into(),
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// The error as `--json` prints it on stdout: the message, the exit code and, for a
    /// bad value, the field it names.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "error": self.to_string(),
            "exit_code": self.exit_code(),
        });
        if let Error::InvalidField { field, value, .. } = self {
            v["field"] = serde_json::json!(field);
            v["value"] = serde_json::json!(value);
        }
        v
    }

    /// Exit code convention of the CLI: 2 for usage errors, 1 for runtime errors.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Parse(_)
            | Error::InvalidField { .. }
            | Error::TooLarge(_)
            | Error::DoesNotFit(_) => 2,
            Error::Interrupted { signal, .. } => 128 + signal,
            _ => 1,
        }
    }
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Cuda(e.to_string())
    }
}

/// A value as a message shows it: long numbers (an f64 near its limits prints 309
/// digits) in exponent form, long or binary text clipped and escaped.
fn shown(v: String) -> String {
    let numeric = v.len() > 20
        && v.trim_start_matches('-')
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.');
    match v.parse::<f64>() {
        Ok(x) if numeric => format!("{x:e}"),
        _ => crate::units::clip(&v),
    }
}
