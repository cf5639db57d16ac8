//! Printing that cannot panic. `std`'s `println!` panics when stdout cannot be written
//! (`twin list > /dev/full`); the binary's `println!`, `print!`, `eprintln!` and
//! `eprint!` (declared here, before every other module, so they shadow `std`'s
//! everywhere in the binary) write through [`emit`] instead, which remembers the first
//! error of each stream and skips that stream from then on. `main` flushes stdout at
//! the end and exits with an error naming the stream when either failed.
//!
//! A closed pipe (`twin ... | head`) still ends the process quietly through SIGPIPE's
//! default action, as other Unix tools do (`main` restores it).

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;

/// The two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    fn slot(self) -> &'static Mutex<Option<io::Error>> {
        static OUT: Mutex<Option<io::Error>> = Mutex::new(None);
        static ERR: Mutex<Option<io::Error>> = Mutex::new(None);
        match self {
            Stream::Stdout => &OUT,
            Stream::Stderr => &ERR,
        }
    }
}

fn record(stream: Stream, e: io::Error) {
    let mut slot = stream.slot().lock().unwrap_or_else(|p| p.into_inner());
    if slot.is_none() {
        *slot = Some(e);
    }
}

fn failed(stream: Stream) -> bool {
    stream
        .slot()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_some()
}

/// Writes `args` (and a newline) to `stream`; an error is remembered, not raised.
pub fn emit(stream: Stream, args: fmt::Arguments<'_>, newline: bool) {
    if failed(stream) {
        return;
    }
    let result = match stream {
        Stream::Stdout => {
            let mut w = io::stdout().lock();
            w.write_fmt(args)
                .and_then(|_| if newline { w.write_all(b"\n") } else { Ok(()) })
        }
        Stream::Stderr => {
            let mut w = io::stderr().lock();
            w.write_fmt(args)
                .and_then(|_| if newline { w.write_all(b"\n") } else { Ok(()) })
        }
    };
    if let Err(e) = result {
        record(stream, e);
    }
}

/// Flushes stdout; then the first write error of either stream, as a message.
pub fn finish() -> Option<String> {
    if let Err(e) = io::stdout().lock().flush() {
        record(Stream::Stdout, e);
    }
    [Stream::Stdout, Stream::Stderr].into_iter().find_map(|s| {
        let slot = s.slot().lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref()
            .map(|e| format!("cannot write to {}: {e}", s.name()))
    })
}

macro_rules! println {
    () => {
        $crate::out::emit($crate::out::Stream::Stdout, format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::out::emit($crate::out::Stream::Stdout, format_args!($($arg)*), true)
    };
}

macro_rules! print {
    ($($arg:tt)*) => {
        $crate::out::emit($crate::out::Stream::Stdout, format_args!($($arg)*), false)
    };
}

macro_rules! eprintln {
    () => {
        $crate::out::emit($crate::out::Stream::Stderr, format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::out::emit($crate::out::Stream::Stderr, format_args!($($arg)*), true)
    };
}

#[allow(unused_macros)] // kept with the other three, for symmetry
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::out::emit($crate::out::Stream::Stderr, format_args!($($arg)*), false)
    };
}
