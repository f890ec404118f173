//! A device for crash tests: it records writes and flushes and, at a chosen
//! event, cuts the power.
//!
//! Writes since the last flush are *pending*: a cut keeps each of them or
//! not at random (a disk may reorder unflushed writes), and with `tear`
//! may keep only some of the 512-byte sectors of a kept write. After the
//! cut every call answers EIO, so the code under test sees exactly which of
//! its calls returned before the power went.
//!
//! The one mutex protects the whole state; it is a test device.

use lanefs_store::{Errno, Result};
use parking_lot::Mutex;

use crate::device::Device;
use crate::layout::SECTOR;

struct State {
    durable: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
    events: u64,
    cut_at: Option<u64>,
    crashed: Option<Vec<u8>>,
    rng: u64,
    tear: bool,
}

pub struct CrashDevice {
    st: Mutex<State>,
}

/// xorshift64*: the tests' deterministic generator.
pub fn next_rand(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

impl CrashDevice {
    /// A device holding `image`, cutting power at write-or-flush event
    /// number `cut_at` (counted from 1), if any.
    pub fn new(image: Vec<u8>, cut_at: Option<u64>, seed: u64, tear: bool) -> CrashDevice {
        CrashDevice {
            st: Mutex::new(State {
                durable: image,
                pending: Vec::new(),
                events: 0,
                cut_at,
                crashed: None,
                rng: seed | 1,
                tear,
            }),
        }
    }

    /// Write and flush events so far.
    pub fn events(&self) -> u64 {
        self.st.lock().events
    }

    /// The image as the power cut left it.
    pub fn crash_image(&self) -> Option<Vec<u8>> {
        self.st.lock().crashed.clone()
    }

    /// The image as if every write had reached the media.
    pub fn current_image(&self) -> Vec<u8> {
        let st = self.st.lock();
        let mut img = st.durable.clone();
        for (off, b) in &st.pending {
            img[*off as usize..*off as usize + b.len()].copy_from_slice(b);
        }
        img
    }

    fn event(st: &mut State) -> Result<bool> {
        if st.crashed.is_some() {
            return Err(Errno::EIO);
        }
        st.events += 1;
        Ok(st.cut_at == Some(st.events))
    }

    fn cut(st: &mut State) {
        let mut img = st.durable.clone();
        let pending = std::mem::take(&mut st.pending);
        for (off, b) in pending {
            if next_rand(&mut st.rng).is_multiple_of(2) {
                continue;
            }
            let torn = st.tear && next_rand(&mut st.rng).is_multiple_of(4);
            for (k, sector) in b.chunks(SECTOR).enumerate() {
                if torn && next_rand(&mut st.rng).is_multiple_of(2) {
                    continue;
                }
                let at = off as usize + k * SECTOR;
                img[at..at + sector.len()].copy_from_slice(sector);
            }
        }
        st.crashed = Some(img);
    }
}

impl Device for CrashDevice {
    fn len(&self) -> u64 {
        self.st.lock().durable.len() as u64
    }

    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        let st = self.st.lock();
        if st.crashed.is_some() {
            return Err(Errno::EIO);
        }
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= st.durable.len() as u64)
            .ok_or(Errno::EIO)?;
        buf.copy_from_slice(&st.durable[off as usize..end as usize]);
        for (o, b) in &st.pending {
            let (ws, we) = (*o, *o + b.len() as u64);
            let (s, e) = (ws.max(off), we.min(end));
            if s < e {
                buf[(s - off) as usize..(e - off) as usize]
                    .copy_from_slice(&b[(s - ws) as usize..(e - ws) as usize]);
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> Result<()> {
        let mut st = self.st.lock();
        let cut = Self::event(&mut st)?;
        if off
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > st.durable.len() as u64)
        {
            return Err(Errno::EIO);
        }
        st.pending.push((off, buf.to_vec()));
        if cut {
            Self::cut(&mut st);
            return Err(Errno::EIO);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut st = self.st.lock();
        let cut = Self::event(&mut st)?;
        if cut {
            // Power fails during the flush: nothing of it is promised.
            Self::cut(&mut st);
            return Err(Errno::EIO);
        }
        let pending = std::mem::take(&mut st.pending);
        for (off, b) in pending {
            st.durable[off as usize..off as usize + b.len()].copy_from_slice(&b);
        }
        Ok(())
    }
}
