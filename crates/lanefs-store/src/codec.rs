//! Little-endian decoding of stored bytes, shared by the record formats of
//! every store (inode records here, journal records in the image store).
//!
//! Every read is bounds-checked: running past the end, or a length that
//! overflows, is `EUCLEAN` (a corrupt structure), never a panic.

use crate::{Errno, Result};

/// A cursor over a byte slice.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// A reader at offset `pos` of `buf`.
    pub fn at(buf: &'a [u8], pos: usize) -> Reader<'a> {
        Reader { buf, pos }
    }

    /// Bytes consumed so far (the offset of the next read).
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(Errno::EUCLEAN)?;
        let s = self.buf.get(self.pos..end).ok_or(Errno::EUCLEAN)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        self.take(N)?.try_into().map_err(|_| Errno::EUCLEAN)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A `u32` length, then that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_refuses_to_overrun() {
        let buf = [1u8, 2, 0, 3, 0, 0, 0, 2, 0, 0, 0, b'h', b'i'];
        let mut r = Reader::new(&buf);
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u16(), Ok(2));
        assert_eq!(r.u32(), Ok(3));
        assert_eq!(r.bytes(), Ok(&b"hi"[..]));
        assert_eq!(r.pos(), buf.len());
        assert_eq!(r.u8(), Err(Errno::EUCLEAN));
        assert_eq!(Reader::at(&buf, 11).take(usize::MAX), Err(Errno::EUCLEAN));
    }
}
