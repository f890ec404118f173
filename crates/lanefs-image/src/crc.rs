//! CRC32C (Castagnoli), the checksum of every metadata block, slot and
//! journal batch. On x86-64 with SSE4.2 (checked once at run time by
//! `is_x86_feature_detected!`, which caches the answer) the `crc32`
//! instruction does 8 bytes at a time; elsewhere a slicing-by-8 table
//! version (tables built at compile time) does. Recovery checksums every
//! slot of every inode table, so this is on the open's critical path. No
//! locks, no atomics of our own.

const POLY_REFLECTED: u32 = 0x82F6_3B78;

/// `TABLES[0]` is the classic byte table; `TABLES[k][b]` is the CRC of
/// byte `b` followed by `k` zero bytes (slicing-by-8).
const TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ POLY_REFLECTED
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        s += 1;
    }
    t
};

/// CRC32C of `parts` concatenated.
pub fn crc32c(parts: &[&[u8]]) -> u32 {
    let mut c = !0u32;
    for p in parts {
        c = update(c, p);
    }
    !c
}

/// Continue the (pre-inverted) state `c` over `p`.
fn update(c: u32, p: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU supports SSE4.2, checked just above, which is
            // the only requirement of `update_sse42`.
            return unsafe { update_sse42(c, p) };
        }
    }
    update_sliced(c, p)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn update_sse42(mut c: u32, p: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut words = p.chunks_exact(8);
    let mut c64 = c as u64;
    for w in &mut words {
        c64 = _mm_crc32_u64(c64, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    c = c64 as u32;
    for &b in words.remainder() {
        c = _mm_crc32_u8(c, b);
    }
    c
}

/// Slicing-by-8: eight table lookups per 8 bytes, no dependency chain
/// through memory between them.
fn update_sliced(mut c: u32, p: &[u8]) -> u32 {
    let t = &TABLES;
    let mut words = p.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ c;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        c = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        c = t[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time definition both fast versions must match.
    fn bytewise(p: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in p {
            c = TABLES[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
        }
        !c
    }

    #[test]
    fn check_value_and_split_inputs() {
        // The standard check value of CRC-32C (RFC 3720 appendix B.4).
        assert_eq!(crc32c(&[b"123456789"]), 0xE306_9283);
        assert_eq!(crc32c(&[b"1234", b"56789"]), 0xE306_9283);
        assert_eq!(crc32c(&[&[0u8; 32]]), 0x8A91_36AA);
        assert_eq!(bytewise(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn fast_versions_match_the_definition() {
        let mut s = 0x1234_5678_9abc_def1u64;
        let data: Vec<u8> = (0..5000)
            .map(|_| crate::crash::next_rand(&mut s) as u8)
            .collect();
        for start in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 100, 508, 4092, 4990] {
                let p = &data[start..start + len];
                let want = bytewise(p);
                assert_eq!(!update_sliced(!0, p), want, "sliced {start} {len}");
                assert_eq!(crc32c(&[p]), want, "dispatched {start} {len}");
                let (a, b) = p.split_at(len / 3);
                assert_eq!(crc32c(&[a, b]), want, "split {start} {len}");
            }
        }
    }
}
