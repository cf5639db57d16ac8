//! NVRTC compilation of the kernel sources (libnvrtc loaded at run time through cudarc),
//! to PTX (`compute_XY`) or to a CUBIN for one GPU (`sm_XY`), with a process-wide cache
//! and an optional on-disk cache.
//!
//! The engine loads CUBINs: a CUBIN runs on any driver that supports its GPU, whereas PTX
//! produced by a newer NVRTC than the driver cannot be JIT-compiled. On a machine without
//! libnvrtc, set `TWIN_KERNEL_CACHE` to a directory of CUBINs compiled elsewhere (for
//! example by `TWIN_KERNEL_CACHE=dir cargo test -p kernels --test nvrtc_compile`).

use crate::{KernelError, KernelSource, Result};
use cudarc::nvrtc::{result, sys};
use spec::stats::fnv1a64;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// Environment variable naming the on-disk kernel cache directory.
pub const CACHE_ENV: &str = "TWIN_KERNEL_CACHE";

/// Whether libnvrtc can be loaded.
pub fn available() -> bool {
    // SAFETY: only dlopen attempts.
    unsafe { sys::is_culib_present() }
}

/// Cache file name of `k` compiled for `arch` (`sm_90`, `compute_90`, ...): changes
/// whenever the source changes.
pub fn cache_name(k: &KernelSource, arch: &str) -> String {
    let ext = if arch.starts_with("sm_") {
        "cubin"
    } else {
        "ptx"
    };
    format!(
        "{}-{arch}-{:016x}.{ext}",
        k.id,
        fnv1a64(k.source.as_bytes())
    )
}

/// The on-disk cache directory from `TWIN_KERNEL_CACHE`, if set and non-empty.
pub fn cache_dir() -> Option<PathBuf> {
    std::env::var_os(CACHE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn no_nvrtc() -> KernelError {
    KernelError::NoNvrtc(format!(
        "no libnvrtc.so.12 / libnvrtc.so on the loader path (install nvidia-cuda-nvrtc-cu12 and put its \
         lib directory on LD_LIBRARY_PATH), and no precompiled kernel in ${CACHE_ENV}"
    ))
}

/// Compiles `k` with NVRTC for `arch`: `compute_XY` gives PTX text, `sm_XY` a CUBIN.
pub fn compile(k: &KernelSource, arch: &str) -> Result<Vec<u8>> {
    if !available() {
        return Err(no_nvrtc());
    }
    let err = |log: String| KernelError::Compile {
        kernel: k.id.to_string(),
        arch: arch.to_string(),
        log,
    };
    let src = CString::new(k.source).map_err(|_| err("source contains a NUL byte".into()))?;
    let name = CString::new(format!("{}.cu", k.id)).map_err(|_| err("bad name".into()))?;
    let prog = result::create_program(&src, Some(&name)).map_err(|e| err(format!("{e:?}")))?;
    let opts = [
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ];
    // SAFETY: `prog` is a live program until destroyed at the end of this block; the
    // output buffers are sized from the matching *Size calls.
    let out = unsafe {
        let compiled = result::compile_program(prog, &opts);
        let out = match compiled {
            Err(e) => {
                let log = result::get_program_log(prog)
                    .map(|l| CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
                    .unwrap_or_default();
                Err(err(format!("{e:?}\n{log}")))
            }
            Ok(()) if arch.starts_with("sm_") => {
                let mut size = 0usize;
                let r = sys::nvrtcGetCUBINSize(prog, &mut size);
                if r != sys::nvrtcResult::NVRTC_SUCCESS {
                    Err(err(format!("nvrtcGetCUBINSize: {r:?}")))
                } else {
                    let mut buf = vec![0u8; size];
                    match sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char) {
                        sys::nvrtcResult::NVRTC_SUCCESS => Ok(buf),
                        r => Err(err(format!("nvrtcGetCUBIN: {r:?}"))),
                    }
                }
            }
            Ok(()) => result::get_ptx(prog)
                .map(|p| CStr::from_ptr(p.as_ptr()).to_bytes().to_vec())
                .map_err(|e| err(format!("nvrtcGetPTX: {e:?}"))),
        };
        let _ = result::destroy_program(prog);
        out
    };
    out
}

fn memory_cache() -> &'static Mutex<HashMap<String, Vec<u8>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Vec<u8>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// `compile` once per process per (kernel, arch, source); with `TWIN_KERNEL_CACHE` set,
/// also read from / written to that directory (so NVRTC is only needed where the cache
/// is filled).
pub fn compile_cached(k: &KernelSource, arch: &str) -> Result<Vec<u8>> {
    let name = cache_name(k, arch);
    if let Some(hit) = memory_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&name)
    {
        return Ok(hit.clone());
    }
    let dir = cache_dir();
    let from_disk = dir
        .as_ref()
        .and_then(|d| std::fs::read(d.join(&name)).ok())
        .filter(|b| !b.is_empty());
    let bytes = match from_disk {
        Some(b) => b,
        None => {
            let b = compile(k, arch)?;
            if let Some(d) = &dir {
                let path = d.join(&name);
                let cache_err = |e: std::io::Error| KernelError::Cache {
                    path: path.display().to_string(),
                    msg: e.to_string(),
                };
                std::fs::create_dir_all(d).map_err(cache_err)?;
                let tmp = d.join(format!(".{name}.tmp"));
                std::fs::write(&tmp, &b)
                    .and_then(|_| std::fs::rename(&tmp, &path))
                    .map_err(cache_err)?;
            }
            b
        }
    };
    memory_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(name, bytes.clone());
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_names_follow_source_and_arch() {
        let a = cache_name(&crate::COPY, "sm_90");
        assert!(a.starts_with("copy-sm_90-") && a.ends_with(".cubin"), "{a}");
        assert!(cache_name(&crate::COPY, "compute_90").ends_with(".ptx"));
        assert_ne!(
            cache_name(&crate::COPY, "sm_90"),
            cache_name(&crate::GATHER, "sm_90")
        );
        assert_ne!(fnv1a64(b"a"), fnv1a64(b"b"));
    }

    #[test]
    fn disk_cache_hit_needs_no_nvrtc() {
        // The only test in this binary touching the environment.
        let dir = tempfile::tempdir().unwrap();
        let name = cache_name(&crate::GATHER, "sm_1");
        std::fs::write(dir.path().join(&name), b"cubin bytes").unwrap();
        std::env::set_var(CACHE_ENV, dir.path());
        let got = compile_cached(&crate::GATHER, "sm_1");
        std::env::remove_var(CACHE_ENV);
        assert_eq!(got.unwrap(), b"cubin bytes");
        // A miss without NVRTC is a clear error; with NVRTC an unknown arch fails to compile.
        let miss = compile_cached(&crate::COPY, "sm_1")
            .unwrap_err()
            .to_string();
        assert!(miss.contains("NVRTC"), "{miss}");
    }
}
