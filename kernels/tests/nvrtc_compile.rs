//! Compiles every kernel with NVRTC (loaded dynamically): to PTX for compute_90 and
//! compute_100, and to CUBINs for sm_90 and sm_100 (which also runs ptxas: register and
//! shared-memory limits).
//!
//! When libnvrtc cannot be loaded the test prints why and skips, unless
//! `TWIN_REQUIRE_NVRTC=1`, in which case a missing libnvrtc fails the test. Any compile
//! error fails it. With `TWIN_KERNEL_CACHE=dir` the CUBINs are also written to `dir`
//! for a GPU machine without NVRTC.

const ARCHS: [&str; 4] = ["compute_90", "compute_100", "sm_90", "sm_100"];

#[test]
fn every_kernel_compiles_for_sm90_and_sm100() {
    let required = std::env::var("TWIN_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    if !kernels::nvrtc::available() {
        let msg = format!(
            "libnvrtc could not be loaded (searched names such as libnvrtc.so.12 / libnvrtc.so \
             on LD_LIBRARY_PATH = {:?}); install it with `python3 -m pip install --target .nvrtc \
             nvidia-cuda-nvrtc-cu12` and set LD_LIBRARY_PATH=$PWD/.nvrtc/nvidia/cuda_nvrtc/lib",
            std::env::var("LD_LIBRARY_PATH").unwrap_or_default()
        );
        if required {
            panic!("TWIN_REQUIRE_NVRTC=1 but {msg}");
        }
        eprintln!("SKIPPED nvrtc compile test: {msg}");
        return;
    }
    let mut failures = Vec::new();
    let mut compiled = 0;
    for k in kernels::all() {
        for arch in ARCHS {
            let out = if arch.starts_with("sm_") {
                kernels::nvrtc::compile_cached(k, arch)
            } else {
                kernels::nvrtc::compile(k, arch)
            };
            match out {
                Ok(bytes) if arch.starts_with("compute_") => {
                    let text = String::from_utf8_lossy(&bytes);
                    for e in k.entry_points {
                        if !text.contains(&format!(".entry {e}(")) {
                            failures.push(format!("{} ({arch}): entry {e} missing from PTX", k.id));
                        }
                    }
                    compiled += 1;
                }
                Ok(bytes) => {
                    // An ELF image naming every entry point.
                    if !bytes.starts_with(b"\x7fELF") {
                        failures.push(format!("{} ({arch}): CUBIN is not an ELF image", k.id));
                    }
                    for e in k.entry_points {
                        if !bytes.windows(e.len()).any(|w| w == e.as_bytes()) {
                            failures
                                .push(format!("{} ({arch}): entry {e} missing from CUBIN", k.id));
                        }
                    }
                    compiled += 1;
                }
                Err(e) => failures.push(format!("{} ({arch}): {e}", k.id)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "NVRTC failures:\n{}",
        failures.join("\n")
    );
    assert_eq!(compiled, kernels::all().len() * ARCHS.len());
    eprintln!("compiled {compiled} kernel/arch pairs with NVRTC");
}

#[test]
fn compile_errors_are_reported_with_the_log() {
    if !kernels::nvrtc::available() {
        eprintln!("SKIPPED: libnvrtc not loadable (see the other test)");
        return;
    }
    let bad = kernels::KernelSource {
        id: "bad",
        source: "extern \"C\" __global__ void bad(float* x) { x[0] = undefined_name; }",
        entry_points: &["bad"],
    };
    let e = kernels::nvrtc::compile(&bad, "compute_90")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad") && e.contains("undefined_name"), "{e}");
}
