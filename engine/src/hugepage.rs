//! Anonymous host memory in 4 KiB pages or 2 MiB transparent huge pages, for the
//! Engram gather measurements on the CPU.

use crate::{EngineError, Result};

const HUGE: usize = 2 << 20;

/// The kernel's THP policy: the bracketed word of
/// `/sys/kernel/mm/transparent_hugepage/enabled` (`always`, `madvise`, `never`), or
/// `unavailable` when the file cannot be read (no THP support, or not Linux).
pub fn thp_setting() -> String {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|s| {
            let a = s.find('[')?;
            let b = s[a..].find(']')?;
            Some(s[a + 1..a + b].to_string())
        })
        .unwrap_or_else(|| "unavailable".to_string())
}

/// A private anonymous mapping of `len` bytes, 2 MiB aligned, advised as huge or as
/// small pages. Unmapped on drop.
pub struct HostRegion {
    base: *mut libc::c_void,
    mapped: usize,
    start: *mut u8,
    len: usize,
    pub huge_requested: bool,
    /// `madvise` result for the requested advice (false: the kernel refused it).
    pub advice_ok: bool,
}

// The region is plain memory owned by this value.
unsafe impl Send for HostRegion {}
unsafe impl Sync for HostRegion {}

impl HostRegion {
    /// Maps `len` bytes and touches every page (so the page size is settled before any
    /// timing). `huge`: `MADV_HUGEPAGE`, otherwise `MADV_NOHUGEPAGE`.
    pub fn new(len: usize, huge: bool) -> Result<HostRegion> {
        let what = if huge { "2 MiB pages" } else { "4 KiB pages" };
        if len == 0 {
            return Err(EngineError::Mmap {
                what: what.into(),
                msg: "zero length".into(),
            });
        }
        let mapped = len.div_ceil(HUGE) * HUGE + HUGE;
        // SAFETY: anonymous private mapping, checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(EngineError::Mmap {
                what: what.into(),
                msg: std::io::Error::last_os_error().to_string(),
            });
        }
        let addr = base as usize;
        let start = (addr.div_ceil(HUGE) * HUGE) as *mut u8;
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: the range lies inside the mapping.
        let advice_ok = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                len.div_ceil(HUGE) * HUGE,
                advice,
            )
        } == 0;
        let mut r = HostRegion {
            base,
            mapped,
            start,
            len,
            huge_requested: huge,
            advice_ok,
        };
        // Touch every page so it is faulted in with its final size.
        let s = r.as_mut_slice();
        for i in (0..s.len()).step_by(4096) {
            s[i] = 1;
        }
        Ok(r)
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `start..start+len` is inside the live mapping.
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }

    /// Bytes of this region backed by huge pages, from `/proc/self/smaps`
    /// (`AnonHugePages` of the mapping). `None` when smaps cannot be read.
    pub fn huge_bytes(&self) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let base = self.base as usize;
        let mut in_region = false;
        let mut total = 0u64;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    in_region = a < base + self.mapped && b > base;
                    continue;
                }
            }
            if in_region {
                if let Some(rest) = line.strip_prefix("AnonHugePages:") {
                    let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
                    total += kb * 1024;
                }
            }
        }
        Some(total)
    }

    /// A note for the measurement: THP policy, whether the advice was accepted and the
    /// share of the table actually backed by huge pages.
    pub fn note(&self) -> String {
        let pct = self
            .huge_bytes()
            .map(|h| (100 * h / self.len as u64).min(100).to_string());
        format!(
            "thp={} advice={} huge_pct={}",
            thp_setting(),
            if self.advice_ok { "ok" } else { "refused" },
            pct.unwrap_or_else(|| "unknown".into())
        )
    }
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe {
            libc::munmap(self.base, self.mapped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_map_touch_and_report() {
        for huge in [false, true] {
            let mut r = HostRegion::new(5 << 20, huge).unwrap();
            assert_eq!(r.as_slice().len(), 5 << 20);
            assert_eq!(r.as_slice().as_ptr() as usize % HUGE, 0);
            r.as_mut_slice()[12345] = 7;
            assert_eq!(r.as_slice()[12345], 7);
            let note = r.note();
            assert!(note.starts_with("thp="), "{note}");
            assert!(note.contains("huge_pct="), "{note}");
            if !huge {
                // MADV_NOHUGEPAGE: no huge pages whatever the policy.
                assert_eq!(r.huge_bytes().unwrap_or(0), 0, "{note}");
            }
            eprintln!("huge={huge}: {note}");
        }
        assert!(HostRegion::new(0, false).is_err());
    }
}
