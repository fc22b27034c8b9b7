// SPDX-License-Identifier: MPL-2.0

use std::fmt;

/// A `ucs_status_t` other than `UCS_OK` and `UCS_INPROGRESS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status(pub i8);

impl Status {
    pub const CANCELED: Status = Status(-16);
    pub const NO_MESSAGE: Status = Status(-1);
    pub const CONNECTION_RESET: Status = Status(-25);
    pub const UNREACHABLE: Status = Status(-6);
    pub const ENDPOINT_TIMEOUT: Status = Status(-80);

    /// Whether the status says the peer or the link to it is gone.
    pub fn is_peer_failure(self) -> bool {
        // UCS_ERR_FIRST_LINK_FAILURE (-40) to UCS_ERR_LAST_ENDPOINT_FAILURE
        // (-89), and the plain connection errors before them.
        (-89..=-40).contains(&self.0) || matches!(self.0, -6 | -25)
    }
}

#[derive(Debug)]
pub enum Error {
    /// libucp could not be loaded, or lacks a function.
    Library(String),
    /// A call failed: which one, and its status.
    Call { call: &'static str, status: Status },
    /// An argument UCX cannot take (an address, a size).
    Argument(String),
}

impl Error {
    pub(crate) fn call(call: &'static str, status: i8) -> Self {
        Self::Call {
            call,
            status: Status(status),
        }
    }

    /// The status of a failed call.
    pub fn status(&self) -> Option<Status> {
        match self {
            Self::Call { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Library(why) => f.write_str(why),
            Self::Call { call, status } => write!(f, "{call} failed: {status}"),
            Self::Argument(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

/// `UCS_OK`, or the error of `call`.
pub(crate) fn check(call: &'static str, status: i8) -> Result<(), Error> {
    if status == 0 {
        Ok(())
    } else {
        Err(Error::call(call, status))
    }
}
