//! Ctrl-C for long runs: the first SIGINT sets a flag the simulator looks at every
//! `sim::serving::CONTROL_EVENTS` events, so the run stops cleanly and reports what it
//! measured so far; the handler then restores the default action, so a second Ctrl-C
//! ends the process at once. Only commands that poll the flag install the handler
//! (`twin calibrate` keeps the default: its log is resumable row by row).

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

#[cfg(unix)]
extern "C" fn on_sigint(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    // SAFETY: signal() is async-signal-safe; restoring the default action.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

/// Installs the handler (once is enough; again is harmless) and returns the flag.
pub fn install() -> &'static AtomicBool {
    #[cfg(unix)]
    // SAFETY: the handler only stores to an atomic and calls signal(), both
    // async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
    &STOP
}

/// A run was stopped by Ctrl-C after printing what it measured; `main` exits with 130
/// (128 + SIGINT), as shells report an interrupted command.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}
