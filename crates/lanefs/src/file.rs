//! Open files: [`File`] and [`OpenOptions`].
//!
//! A [`File`] owns one core [`OpenFile`] (closed when the `File` drops) and
//! its own position, a plain `u64` changed only through `&mut self`.
//! Positional calls (`read_at`, `write_at`) take `&self` and leave the
//! position alone, so one `File` may be shared between threads for
//! positional I/O.
//!
//! Locks: [`File::try_clone`] makes the position one that the original and
//! its clones share, as `dup` does, and so does the first read, write or
//! seek through a shared `&File` (std implements `Read`, `Write` and `Seek`
//! for `&File`): from then on it lives in `File::shared_pos`, a
//! `Mutex<u64>` held for the whole of each call through the position (as
//! Linux's `f_pos_lock`), so that the calls move it one at a time. It is a
//! leaf: the engine's locks are taken inside it, never the reverse.
//! `shared_pos` itself is a `OnceLock` set once, from the handle's own
//! position; it is set through `&self` only, so no call through `&mut
//! self` (the only writer of the own position) runs meanwhile.
//!
//! The checks Linux's VFS makes before a file system sees a request live
//! here: `EBADF` for a read on a write-only file and the reverse,
//! `rw_verify_area`'s `EINVAL` for offsets and lengths past `i64::MAX`,
//! `vfs_fallocate`'s mode and range checks, `ftruncate`'s `EINVAL` on a file
//! not open for writing.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use lanefs_core::{
    Cred, Errno, FileKind, Fs, Ino, OpenFile, Result, SetAttr, TimeSet, Timespec,
    FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE,
};

use crate::handle::InnerRef;
use crate::{Filesystem, Metadata};

/// `fallocate(2)` modes Linux knows that lanefs does not do (as tmpfs).
const FALLOC_FL_COLLAPSE_RANGE: i32 = libc::FALLOC_FL_COLLAPSE_RANGE;
const FALLOC_FL_INSERT_RANGE: i32 = libc::FALLOC_FL_INSERT_RANGE;
const FALLOC_FL_UNSHARE_RANGE: i32 = libc::FALLOC_FL_UNSHARE_RANGE;
/// Linux 6.17's `FALLOC_FL_WRITE_ZEROES` (not in every libc yet).
const FALLOC_FL_WRITE_ZEROES: i32 = 0x80;

/// An open file of a [`Filesystem`]: implements [`Read`], [`Write`] and
/// [`Seek`], also for `&File` as [`std::fs::File`] does, plus positional
/// I/O.
///
/// ```
/// use std::io::{Read, Seek, SeekFrom, Write};
/// let fs = lanefs::Filesystem::new_in_memory()?;
/// let mut f = fs.create("/notes.txt")?;
/// f.write_all(b"hello world")?;
/// f.seek(SeekFrom::Start(6))?;
/// let mut s = String::new();
/// // `create` opens write-only, as std::fs::File::create does.
/// assert_eq!(f.read_to_string(&mut s).unwrap_err().raw_os_error(), Some(libc::EBADF));
/// let mut f = fs.open("/notes.txt")?;
/// f.seek(SeekFrom::Start(6))?;
/// f.read_to_string(&mut s)?;
/// assert_eq!(s, "world");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct File {
    /// Dropped first (fields drop in order): the engine's handle, then the
    /// reference to the path layer's state.
    handle: OpenFile,
    inner: InnerRef,
    /// The opener's credentials, by value (an `Arc` of them would be a
    /// count every open and close writes).
    cred: Cred,
    kind: FileKind,
    readable: bool,
    writable: bool,
    /// Opened `O_PATH`: names the file, grants no access (`EBADF`).
    path_only: bool,
    /// The position while no clone shares it.
    pos: u64,
    /// The position shared with clones, once [`try_clone`](File::try_clone)
    /// made one (module doc).
    shared_pos: OnceLock<Arc<Mutex<u64>>>,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("ino", &self.handle.ino())
            .field("kind", &self.kind)
            .field("readable", &self.readable)
            .field("writable", &self.writable)
            .field("pos", &self.position())
            .finish()
    }
}

/// Linux's `rw_verify_area`: an offset or an end past `i64::MAX` is `EINVAL`.
fn verify_area(offset: u64, len: usize) -> Result<()> {
    let max = i64::MAX as u64;
    match offset.checked_add(len as u64) {
        Some(end) if offset <= max && end <= max => Ok(()),
        _ => Err(Errno::EINVAL),
    }
}

impl File {
    pub(crate) fn new(fs: &Filesystem, handle: OpenFile, kind: FileKind, flags: i32) -> File {
        let acc = flags & libc::O_ACCMODE;
        let path_only = flags & libc::O_PATH != 0;
        File {
            handle,
            inner: fs.handle_ref(),
            cred: fs.cred().clone(),
            kind,
            readable: !path_only && (acc == libc::O_RDONLY || acc == libc::O_RDWR),
            writable: !path_only && (acc == libc::O_WRONLY || acc == libc::O_RDWR),
            path_only,
            pos: 0,
            shared_pos: OnceLock::new(),
        }
    }

    /// A second `File` for the same open file, as
    /// [`std::fs::File::try_clone`] (`dup`): same access mode and flags,
    /// and one position that both move (a read through either goes on
    /// where the other stopped). Each closes its own handle when it drops;
    /// the file stays open while any is.
    ///
    /// ```
    /// use std::io::{Read, Seek, SeekFrom};
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.write("/f", b"abcdef")?;
    /// let mut a = fs.open("/f")?;
    /// let mut b = a.try_clone()?;
    /// let mut two = [0u8; 2];
    /// a.read_exact(&mut two)?;
    /// b.read_exact(&mut two)?;
    /// assert_eq!(&two, b"cd");
    /// assert_eq!(a.stream_position()?, 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_clone(&self) -> io::Result<File> {
        let handle = self.handle.reopen_unchecked(self.handle.flags())?;
        self.shared_pos();
        let shared = self.shared_pos.get().expect("just made").clone();
        Ok(File {
            handle,
            inner: crate::handle::inner_ref(&self.inner),
            cred: self.cred.clone(),
            kind: self.kind,
            readable: self.readable,
            writable: self.writable,
            path_only: self.path_only,
            pos: 0,
            shared_pos: OnceLock::from(shared),
        })
    }

    /// Run `f` with the position, held (shared) or this handle's own.
    fn with_pos<R>(&mut self, f: impl FnOnce(&File, &mut u64) -> io::Result<R>) -> io::Result<R> {
        match self.shared_pos.get() {
            Some(shared) => f(self, &mut lock(shared)),
            None => {
                let mut pos = self.pos;
                let r = f(self, &mut pos);
                self.pos = pos;
                r
            }
        }
    }

    fn core(&self) -> &Fs {
        &self.inner.fs
    }

    /// Opened with `O_PATH`: it names the file and grants no access.
    pub fn is_path(&self) -> bool {
        self.path_only
    }

    /// Linux's `fdget` of an `O_PATH` descriptor for any call but the few
    /// that only name the file: `EBADF`.
    fn not_path_only(&self) -> io::Result<()> {
        if self.path_only {
            return Err(Errno::EBADF.into());
        }
        Ok(())
    }

    /// [`OpenOptions::new`], as [`std::fs::File::options`].
    pub fn options() -> OpenOptions {
        OpenOptions::new()
    }

    /// The inode number of the open file.
    pub fn ino(&self) -> Ino {
        self.handle.ino()
    }

    /// The core handle, for calls the path layer does not wrap.
    pub fn handle(&self) -> &OpenFile {
        &self.handle
    }

    /// The current position (as `lseek(fd, 0, SEEK_CUR)`).
    pub fn position(&self) -> u64 {
        match self.shared_pos.get() {
            Some(shared) => *lock(shared),
            None => self.pos,
        }
    }

    /// Read at `offset` without moving the position (`pread`).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // pread64 rejects a negative offset before anything else.
        if offset > i64::MAX as u64 {
            return Err(Errno::EINVAL.into());
        }
        if !self.readable {
            return Err(Errno::EBADF.into());
        }
        verify_area(offset, buf.len())?;
        if self.kind == FileKind::Directory {
            return Err(Errno::EISDIR.into());
        }
        Ok(self.core().read(&self.handle, offset, buf)?)
    }

    /// Write at `offset` without moving the position (`pwrite`; as on
    /// Linux, a file opened with append writes at its end anyway).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        Ok(self.write_at_inner(buf, offset)?.0)
    }

    /// Fill `buf` from `offset` on without moving the position, as
    /// [`std::os::unix::fs::FileExt::read_exact_at`]: a file that ends
    /// first is an [`io::ErrorKind::UnexpectedEof`] error (what was read
    /// stays in `buf`).
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.write("/f", b"0123456789")?;
    /// let f = fs.open("/f")?;
    /// let mut buf = [0u8; 4];
    /// f.read_exact_at(&mut buf, 3)?;
    /// assert_eq!(&buf, b"3456");
    /// let err = f.read_exact_at(&mut buf, 8).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "failed to fill whole buffer",
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Write all of `buf` at `offset` without moving the position, as
    /// [`std::os::unix::fs::FileExt::write_all_at`].
    pub fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "failed to write whole buffer",
                    ))
                }
                n => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    fn write_at_inner(&self, buf: &[u8], offset: u64) -> Result<(usize, u64)> {
        if offset > i64::MAX as u64 {
            return Err(Errno::EINVAL);
        }
        if !self.writable {
            return Err(Errno::EBADF);
        }
        verify_area(offset, buf.len())?;
        self.core().write(&self.handle, offset, buf)
    }

    /// Attributes of the open file (`fstat`).
    pub fn metadata(&self) -> io::Result<Metadata> {
        Ok(Metadata(self.core().getattr(self.ino())?))
    }

    /// Truncate or extend to `size` (`ftruncate`): `EINVAL` unless the file
    /// is a regular file open for writing or `size` exceeds `i64::MAX`
    /// (that first, as `do_sys_ftruncate`; then `EBADF` for `O_PATH`).
    pub fn set_len(&self, size: u64) -> io::Result<()> {
        if size > i64::MAX as u64 {
            return Err(Errno::EINVAL.into());
        }
        self.not_path_only()?;
        if self.kind != FileKind::Regular || !self.writable {
            return Err(Errno::EINVAL.into());
        }
        let changes = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        self.core()
            .setattr_no_attr(&self.cred, self.ino(), &changes, Some(&self.handle))?;
        Ok(())
    }

    /// Change permission bits through the open file (`fchmod`).
    pub fn set_permissions(&self, mode: u32) -> io::Result<()> {
        self.not_path_only()?;
        let changes = SetAttr {
            mode: Some(mode & 0o7777),
            ..SetAttr::default()
        };
        self.core()
            .setattr_no_attr(&self.cred, self.ino(), &changes, Some(&self.handle))?;
        Ok(())
    }

    /// Change the owner and group through the open file (`fchown`, as
    /// [`std::os::unix::fs::fchown`]); `None` leaves an id alone.
    pub fn set_owner(&self, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        crate::attrs::chown_common(
            self.core(),
            &self.cred,
            self.ino(),
            self.kind,
            Some(&self.handle),
            uid,
            gid,
        )
    }

    /// `futimens(fd, [atime, mtime])`: `None` is `UTIME_OMIT`,
    /// [`TimeSet::Now`] is `UTIME_NOW` (the times std's
    /// [`std::fs::File::set_times`] sets, from a [`TimeSet`] each). Setting
    /// explicit times needs the owner (or root); both `Now` needs the owner
    /// or a handle open for writing or write permission; an `At` with
    /// `nsec` ≥ 10⁹ is `EINVAL`.
    ///
    /// ```
    /// use lanefs::{TimeSet, Timespec};
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// let f = fs.create("/f")?;
    /// let t = Timespec { sec: 1_000_000_000, nsec: 7 };
    /// f.set_times(Some(TimeSet::At(t)), None)?;
    /// assert_eq!(f.metadata()?.atime(), t);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_times(&self, atime: Option<TimeSet>, mtime: Option<TimeSet>) -> io::Result<()> {
        let bad =
            |t: &Option<TimeSet>| matches!(t, Some(TimeSet::At(ts)) if ts.nsec >= 1_000_000_000);
        if bad(&atime) || bad(&mtime) {
            return Err(Errno::EINVAL.into());
        }
        if atime.is_none() && mtime.is_none() {
            return Ok(());
        }
        let changes = SetAttr {
            atime,
            mtime,
            ..SetAttr::default()
        };
        self.core()
            .setattr_no_attr(&self.cred, self.ino(), &changes, Some(&self.handle))?;
        Ok(())
    }

    /// Set the modification time alone, as
    /// [`std::fs::File::set_modified`].
    pub fn set_modified(&self, time: SystemTime) -> io::Result<()> {
        self.set_times(None, Some(TimeSet::At(timespec_of(time)?)))
    }

    /// Flush data and metadata (`fsync`).
    pub fn sync_all(&self) -> io::Result<()> {
        self.not_path_only()?;
        Ok(self.core().fsync(&self.handle, false)?)
    }

    /// Flush data (`fdatasync`).
    pub fn sync_data(&self) -> io::Result<()> {
        self.not_path_only()?;
        Ok(self.core().fsync(&self.handle, true)?)
    }

    /// `fallocate(2)` with Linux's checks, in `vfs_fallocate`'s order:
    /// `EINVAL` for a negative offset or a length ≤ 0; `EOPNOTSUPP` for a
    /// mode Linux does not know (unknown bits, two modes at once, punch
    /// without keep-size, keep-size with collapse, insert or write-zeroes);
    /// `EBADF` unless open for writing; `EPERM` for an immutable file or,
    /// but for a plain allocation, an append-only one;
    /// `ESPIPE`/`EISDIR`/`ENODEV` by file type; `EFBIG` when the range ends past `i64::MAX`; and only then
    /// `EOPNOTSUPP` for the modes Linux knows that lanefs does not do, as
    /// tmpfs (collapse, insert, unshare, write-zeroes).
    pub fn fallocate(&self, mode: i32, offset: i64, len: i64) -> io::Result<()> {
        self.not_path_only()?;
        if offset < 0 || len <= 0 {
            return Err(Errno::EINVAL.into());
        }
        let known = FALLOC_FL_KEEP_SIZE
            | FALLOC_FL_PUNCH_HOLE
            | FALLOC_FL_ZERO_RANGE
            | FALLOC_FL_COLLAPSE_RANGE
            | FALLOC_FL_INSERT_RANGE
            | FALLOC_FL_UNSHARE_RANGE
            | FALLOC_FL_WRITE_ZEROES;
        if mode & !known != 0 {
            return Err(Errno::EOPNOTSUPP.into());
        }
        let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
        let valid = match mode & !FALLOC_FL_KEEP_SIZE {
            0 | FALLOC_FL_ZERO_RANGE | FALLOC_FL_UNSHARE_RANGE => true,
            FALLOC_FL_PUNCH_HOLE => keep,
            FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE | FALLOC_FL_WRITE_ZEROES => !keep,
            _ => false,
        };
        if !valid {
            return Err(Errno::EOPNOTSUPP.into());
        }
        if !self.writable {
            return Err(Errno::EBADF.into());
        }
        lanefs_core::iflags::may_fallocate(self.handle.inode_flags(), mode)?;
        match self.kind {
            FileKind::Fifo => return Err(Errno::ESPIPE.into()),
            FileKind::Directory => return Err(Errno::EISDIR.into()),
            FileKind::Regular => {}
            _ => return Err(Errno::ENODEV.into()),
        }
        if offset.checked_add(len).is_none() {
            return Err(Errno::EFBIG.into());
        }
        let done = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
        if mode & !done != 0 {
            return Err(Errno::EOPNOTSUPP.into());
        }
        Ok(self.core().fallocate(&self.handle, mode, offset, len)?)
    }

    /// Reserve space for `offset..offset + len`, growing the file if needed
    /// (`fallocate` mode 0).
    pub fn allocate(&self, offset: u64, len: u64) -> io::Result<()> {
        let (o, l) = to_i64_range(offset, len)?;
        self.fallocate(0, o, l)
    }

    /// Free the space of `offset..offset + len`; it reads as zeros after
    /// (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`).
    pub fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        let (o, l) = to_i64_range(offset, len)?;
        self.fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, o, l)
    }
}

/// `time` as a [`Timespec`] (`EINVAL` beyond what an `i64` of seconds
/// holds).
fn timespec_of(time: SystemTime) -> io::Result<Timespec> {
    let too_far = || io::Error::from(Errno::EINVAL);
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => Ok(Timespec {
            sec: i64::try_from(d.as_secs()).map_err(|_| too_far())?,
            nsec: d.subsec_nanos(),
        }),
        Err(before) => {
            let d = before.duration();
            let secs = i64::try_from(d.as_secs()).map_err(|_| too_far())?;
            Ok(match d.subsec_nanos() {
                0 => Timespec {
                    sec: -secs,
                    nsec: 0,
                },
                n => Timespec {
                    sec: (-secs).checked_sub(1).ok_or_else(too_far)?,
                    nsec: 1_000_000_000 - n,
                },
            })
        }
    }
}

fn to_i64_range(offset: u64, len: u64) -> io::Result<(i64, i64)> {
    match (i64::try_from(offset), i64::try_from(len)) {
        (Ok(o), Ok(l)) => Ok((o, l)),
        _ => Err(Errno::EINVAL.into()),
    }
}

// The calls through the position, on a `File` and the position it uses
// (its own, or the shared one held).

fn read_with(f: &File, pos: &mut u64, buf: &mut [u8]) -> io::Result<usize> {
    let n = f.read_at(buf, *pos)?;
    *pos += n as u64;
    Ok(n)
}

/// As `readv`: the buffers filled in turn until the file ends, in one turn
/// of the position.
fn read_vectored_with(
    f: &File,
    pos: &mut u64,
    bufs: &mut [io::IoSliceMut<'_>],
) -> io::Result<usize> {
    if bufs.iter().all(|b| b.is_empty()) {
        return read_with(f, pos, &mut []);
    }
    let mut total = 0usize;
    for buf in bufs.iter_mut().filter(|b| !b.is_empty()) {
        let want = buf.len();
        match f.read_at(buf, *pos) {
            Ok(n) => {
                total += n;
                *pos += n as u64;
                if n < want {
                    break;
                }
            }
            // What was read before an error is the result, as a short
            // read.
            Err(_) if total > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

fn write_with(f: &File, pos: &mut u64, buf: &[u8]) -> io::Result<usize> {
    let (n, end) = f.write_at_inner(buf, *pos)?;
    *pos = end;
    Ok(n)
}

/// As `writev`: all the buffers in one write (so that an appending write
/// stays whole).
fn write_vectored_with(f: &File, pos: &mut u64, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
    let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
    match (nonempty.next(), nonempty.next()) {
        (None, _) => write_with(f, pos, &[]),
        (Some(one), None) => write_with(f, pos, one),
        _ => {
            let mut all = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
            for b in bufs {
                all.extend_from_slice(b);
            }
            write_with(f, pos, &all)
        }
    }
}

/// As `lseek`: `SEEK_END` is relative to the current size; a negative
/// result is `EINVAL`.
fn seek_with(f: &File, pos: &mut u64, to: SeekFrom) -> io::Result<u64> {
    f.not_path_only()?;
    let (base, delta) = match to {
        SeekFrom::Start(o) => {
            if o > i64::MAX as u64 {
                return Err(Errno::EINVAL.into());
            }
            *pos = o;
            return Ok(o);
        }
        SeekFrom::Current(d) => (*pos, d),
        // Directories seek like tmpfs's: SEEK_END is EINVAL.
        SeekFrom::End(_) if f.kind == FileKind::Directory => return Err(Errno::EINVAL.into()),
        SeekFrom::End(d) => (f.core().getattr(f.ino())?.size, d),
    };
    let new = (base as i64)
        .checked_add(delta)
        .filter(|n| *n >= 0)
        .ok_or(Errno::EINVAL)?;
    *pos = new as u64;
    Ok(*pos)
}

impl File {
    /// The position shared with clones and `&File` calls, made from this
    /// handle's own the first time (module doc).
    fn shared_pos(&self) -> &Mutex<u64> {
        self.shared_pos
            .get_or_init(|| Arc::new(Mutex::new(self.pos)))
    }

    /// How much of the file is left past the position (0 for what is not
    /// a regular file): what `read_to_end` reserves.
    fn left_to_read(&self) -> io::Result<u64> {
        Ok(match self.kind {
            FileKind::Regular => self
                .core()
                .getattr(self.ino())?
                .size
                .saturating_sub(self.position()),
            _ => 0,
        })
    }
}

/// As [`std::fs::File`]'s `read_to_end`: room for the `left` bytes of the
/// file is reserved first, fallibly (a sparse file too big to hold in
/// memory is an [`io::ErrorKind::OutOfMemory`] error, not an abort), then
/// `r` is read until it ends.
fn read_to_end_reserved<R: Read>(r: &mut R, left: u64, buf: &mut Vec<u8>) -> io::Result<usize> {
    const PROBE: usize = 32;
    let oom = |_| io::Error::from(io::ErrorKind::OutOfMemory);
    buf.try_reserve(usize::try_from(left).unwrap_or(usize::MAX))
        .map_err(oom)?;
    let start = buf.len();
    loop {
        if buf.capacity() == buf.len() {
            // Full: a small read says whether the file goes on before
            // the vector grows.
            let mut probe = [0u8; PROBE];
            match r.read(&mut probe) {
                Ok(0) => break,
                Ok(n) => {
                    buf.try_reserve(buf.len().max(8192)).map_err(oom)?;
                    buf.extend_from_slice(&probe[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        let len = buf.len();
        buf.resize(buf.capacity(), 0);
        match r.read(&mut buf[len..]) {
            Ok(0) => {
                buf.truncate(len);
                break;
            }
            Ok(n) => buf.truncate(len + n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => buf.truncate(len),
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
    Ok(buf.len() - start)
}

/// [`read_to_end_reserved`], then the bytes appended if they are UTF-8
/// (else an [`io::ErrorKind::InvalidData`] error and `buf` unchanged), as
/// std's.
fn read_to_string_reserved<R: Read>(r: &mut R, left: u64, buf: &mut String) -> io::Result<usize> {
    let mut bytes = Vec::new();
    read_to_end_reserved(r, left, &mut bytes)?;
    let s = String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })?;
    buf.push_str(&s);
    Ok(s.len())
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.with_pos(|f, pos| read_with(f, pos, buf))
    }

    /// As `readv` (the trait's default fills only the first non-empty
    /// buffer).
    fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        self.with_pos(|f, pos| read_vectored_with(f, pos, bufs))
    }

    /// As std's: room for the rest of the file reserved first, fallibly.
    fn read_to_end(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let left = self.left_to_read()?;
        read_to_end_reserved(self, left, buf)
    }

    fn read_to_string(&mut self, buf: &mut String) -> io::Result<usize> {
        let left = self.left_to_read()?;
        read_to_string_reserved(self, left, buf)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.with_pos(|f, pos| write_with(f, pos, buf))
    }

    /// As `writev` (the trait's default writes only the first non-empty
    /// buffer).
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.with_pos(|f, pos| write_vectored_with(f, pos, bufs))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    /// As `lseek`: `SEEK_END` is relative to the current size; a negative
    /// result is `EINVAL`.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.with_pos(|f, pos| seek_with(f, pos, to))
    }
}

/// A shared `File` reads, writes and seeks as std's `&File` does: through
/// the one position, which its first such call makes the shared one
/// (module doc), held for each call.
impl Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut pos = lock(self.shared_pos());
        read_with(self, &mut pos, buf)
    }

    fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        let mut pos = lock(self.shared_pos());
        read_vectored_with(self, &mut pos, bufs)
    }

    fn read_to_end(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let left = self.left_to_read()?;
        read_to_end_reserved(self, left, buf)
    }

    fn read_to_string(&mut self, buf: &mut String) -> io::Result<usize> {
        let left = self.left_to_read()?;
        read_to_string_reserved(self, left, buf)
    }
}

impl Write for &File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut pos = lock(self.shared_pos());
        write_with(self, &mut pos, buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut pos = lock(self.shared_pos());
        write_vectored_with(self, &mut pos, bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for &File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let mut pos = lock(self.shared_pos());
        seek_with(self, &mut pos, to)
    }
}

/// The position's lock (a panic while it was held left a valid `u64`).
fn lock(m: &Mutex<u64>) -> std::sync::MutexGuard<'_, u64> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Options for [`Filesystem::open_with`], as [`std::fs::OpenOptions`] plus
/// `mode` and raw `open(2)` flags.
///
/// ```
/// use lanefs::OpenOptions;
/// let fs = lanefs::Filesystem::new_in_memory()?;
/// let f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&fs, "/secret")?;
/// assert_eq!(f.metadata()?.permissions(), 0o600);
/// // create_new fails when the name exists.
/// let err = OpenOptions::new().write(true).create_new(true).open(&fs, "/secret").unwrap_err();
/// assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
    custom_flags: i32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// All options off, mode `0o666` (before the umask).
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o666,
            custom_flags: 0,
        }
    }
    pub fn read(&mut self, on: bool) -> &mut Self {
        self.read = on;
        self
    }
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.write = on;
        self
    }
    /// Writes go to the end of the file (`O_APPEND`; implies write).
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.append = on;
        self
    }
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.truncate = on;
        self
    }
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.create = on;
        self
    }
    /// `O_CREAT | O_EXCL`.
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.create_new = on;
        self
    }
    /// Permission bits of a created file, before the umask.
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }
    /// Extra `open(2)` flags: `O_NOFOLLOW`, `O_DIRECTORY`, `O_NOATIME`, …
    /// (the access mode bits are ignored).
    pub fn custom_flags(&mut self, flags: i32) -> &mut Self {
        self.custom_flags = flags;
        self
    }

    /// The `open(2)` flags these options stand for (std's rules: `EINVAL`
    /// for truncate or create without write or append access, truncate with
    /// append (unless `create_new`), or no access at all).
    pub fn flags(&self) -> io::Result<i32> {
        let acc = match (self.read, self.write || self.append) {
            (true, false) => libc::O_RDONLY,
            (false, true) => libc::O_WRONLY,
            (true, true) => libc::O_RDWR,
            (false, false) => return Err(Errno::EINVAL.into()),
        };
        let writes = self.write || self.append;
        if (self.truncate || self.create || self.create_new) && !writes {
            return Err(Errno::EINVAL.into());
        }
        // std refuses append with truncate (unless create_new, which
        // drops the truncate): an appending file is not emptied on open.
        if self.append && self.truncate && !self.create_new {
            return Err(Errno::EINVAL.into());
        }
        let mut flags = acc | (self.custom_flags & !libc::O_ACCMODE);
        if self.append {
            flags |= libc::O_APPEND;
        }
        if self.truncate && !self.create_new {
            flags |= libc::O_TRUNC;
        }
        if self.create_new {
            flags |= libc::O_CREAT | libc::O_EXCL;
        } else if self.create {
            flags |= libc::O_CREAT;
        }
        Ok(flags)
    }

    /// Open `path` in `fs` with these options.
    pub fn open<P: AsRef<Path>>(&self, fs: &Filesystem, path: P) -> io::Result<File> {
        fs.open_flags(path, self.flags()?, self.mode)
    }
}
