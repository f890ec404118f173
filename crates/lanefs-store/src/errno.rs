//! Typed errors that carry a POSIX errno.
//!
//! Every fallible call in every lanefs layer returns [`Result`], whose error is
//! an [`Errno`]: the same number Linux would return for the same request, so
//! the FUSE adapter can answer the kernel with it unchanged and the Rust API
//! can convert it into a [`std::io::Error`].

use std::fmt;

/// A POSIX error number (positive, as in `errno`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

/// Result type used throughout lanefs.
pub type Result<T> = std::result::Result<T, Errno>;

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Errno = Errno(libc::$name);
            )*

            /// The symbolic name of this errno (`"ENOENT"`), or `None` if unknown.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(libc::$name => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

errnos!(
    EPERM,
    ENOENT,
    EIO,
    ENXIO,
    E2BIG,
    EBADF,
    EAGAIN,
    ENOMEM,
    EACCES,
    EFAULT,
    EBUSY,
    EEXIST,
    EXDEV,
    ENODEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    ENFILE,
    EMFILE,
    ETXTBSY,
    EFBIG,
    ENOSPC,
    ESPIPE,
    EROFS,
    EMLINK,
    ERANGE,
    ENAMETOOLONG,
    ENOSYS,
    ENOTEMPTY,
    ENOTTY,
    ELOOP,
    ENODATA,
    EOVERFLOW,
    EOPNOTSUPP,
    ESTALE,
    EUCLEAN,
    EDQUOT,
);

impl Errno {
    /// The raw errno value.
    pub fn raw(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = std::io::Error::from_raw_os_error(self.0);
        write!(f, "{:?}: {}", self, msg)
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

impl From<std::io::Error> for Errno {
    /// Keeps the OS errno when there is one; anything else becomes `EIO`.
    fn from(e: std::io::Error) -> Self {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_io_roundtrip() {
        assert_eq!(Errno::ENOENT.name(), Some("ENOENT"));
        assert_eq!(format!("{:?}", Errno::ENOTEMPTY), "ENOTEMPTY");
        let io: std::io::Error = Errno::EEXIST.into();
        assert_eq!(io.raw_os_error(), Some(libc::EEXIST));
        assert_eq!(Errno::from(io), Errno::EEXIST);
        assert_eq!(Errno(9999).name(), None);
    }
}
