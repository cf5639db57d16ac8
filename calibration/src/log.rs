//! The measurement log: `measurements.csv`, one row per measured point, appended and
//! fsynced row by row so an interrupted run keeps every finished point; a rerun skips
//! points already present (resume).

use crate::error::{io_err, CalibrationError, Result};
use engine::{Measurement, Point};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// CSV header, in column order.
pub const COLUMNS: [&str; 14] = [
    "op",
    "shape",
    "dtype",
    "median_s",
    "p10_s",
    "p90_s",
    "bytes",
    "flops",
    "achieved_bytes_per_s",
    "achieved_flops_per_s",
    "device",
    "driver",
    "timestamp",
    "note",
];

/// One row of `measurements.csv`. `note` (last column) holds run facts such as the THP
/// state of a gather.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeasurementRecord {
    pub op: String,
    pub shape: String,
    pub dtype: String,
    pub median_s: f64,
    pub p10_s: f64,
    pub p90_s: f64,
    pub bytes: u64,
    pub flops: u64,
    pub achieved_bytes_per_s: f64,
    pub achieved_flops_per_s: f64,
    pub device: String,
    pub driver: String,
    pub timestamp: String,
    #[serde(default)]
    pub note: String,
}

impl MeasurementRecord {
    pub fn from_measurement(
        m: &Measurement,
        device: &str,
        driver: &str,
        timestamp: &str,
    ) -> MeasurementRecord {
        MeasurementRecord {
            op: m.point.op.clone(),
            shape: m.point.shape.clone(),
            dtype: m.point.dtype.clone(),
            median_s: m.stats.median_s,
            p10_s: m.stats.p10_s,
            p90_s: m.stats.p90_s,
            bytes: m.bytes,
            flops: m.flops,
            achieved_bytes_per_s: m.achieved_bytes_per_s,
            achieved_flops_per_s: m.achieved_flops_per_s,
            device: device.to_string(),
            driver: driver.to_string(),
            timestamp: timestamp.to_string(),
            note: m.note.clone(),
        }
    }

    pub fn point(&self) -> Point {
        Point {
            op: self.op.clone(),
            shape: self.shape.clone(),
            dtype: self.dtype.clone(),
        }
    }

    /// Value of `key` in the `k=v;k=v` shape.
    pub fn shape_value(&self, key: &str) -> Option<&str> {
        self.shape
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    pub fn shape_u64(&self, key: &str) -> Result<u64> {
        self.shape_value(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| CalibrationError::MissingShape {
                op: self.op.clone(),
                shape: self.shape.clone(),
                key: key.to_string(),
            })
    }

    /// Value of `key` in the space-separated `k=v` note.
    pub fn note_value(&self, key: &str) -> Option<&str> {
        self.note
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

/// A last line without its newline that is not a whole row: cut short by an
/// interrupted write (or damaged), and left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutRow {
    /// Its 1-based line number.
    pub line: usize,
    /// Its length in bytes.
    pub bytes: usize,
}

/// A measurement log as read, without changing the file.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRead {
    pub rows: Vec<MeasurementRecord>,
    /// The last line, when it lacks its newline and is not a whole row.
    pub cut: Option<CutRow>,
    /// The last line lacks its newline but is a whole row (kept in `rows`).
    pub unterminated: bool,
    /// Bytes up to the end of the last whole row (what a repair keeps).
    pub whole_bytes: usize,
}

/// Whether `r`, read from a line without its newline, is a whole row: its timestamp
/// is complete (`YYYY-MM-DDThh:mm:ssZ`) and its note is `key=value` pairs. (A cut
/// inside the note's last value cannot be told from a whole row; the CSV's own writer
/// puts every row and its newline in one write, so only damage from outside leaves a
/// row without its newline.)
fn looks_whole(r: &MeasurementRecord) -> bool {
    let t = r.timestamp.as_bytes();
    let stamp = t.len() == 20
        && t.iter().enumerate().all(|(i, &b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            19 => b == b'Z',
            _ => b.is_ascii_digit(),
        });
    let note = r.note.split_whitespace().all(|kv| {
        kv.split_once('=')
            .is_some_and(|(k, v)| !k.is_empty() && !v.is_empty())
    });
    stamp && note
}

/// Largest measurement log read (a full plan's log is well under a megabyte).
pub const MAX_LOG_BYTES: u64 = 1 << 30;

/// Largest profile read.
pub const MAX_PROFILE_BYTES: u64 = 16 << 20;

/// The bytes of `path`, refused past `max` (a device or a wrong file, such as
/// `/dev/zero`, would otherwise be read without end).
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .map_err(io_err(path))?;
    if bytes.len() as u64 > max {
        return Err(CalibrationError::TooLarge {
            path: path.into(),
            max,
        });
    }
    Ok(bytes)
}

/// Reads every row of a measurement log and what is wrong with its end, changing
/// nothing. A header that is not the log's, or a bad row before the last line, is an
/// error naming the file.
pub fn read_log(path: &Path) -> Result<LogRead> {
    let bytes = read_bounded(path, MAX_LOG_BYTES)?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let (head, tail) = bytes.split_at(complete);
    if head.is_empty() {
        // Not even a whole header line.
        return Err(CalibrationError::Csv {
            path: path.into(),
            msg: if bytes.is_empty() {
                "the file is empty".into()
            } else {
                "no complete header line".into()
            },
        });
    }
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(head);
    let headers = rdr.headers().map_err(|e| csv_err(path, e))?.clone();
    if headers.iter().take(13).ne(COLUMNS.iter().take(13).copied()) {
        return Err(CalibrationError::Csv {
            path: path.into(),
            msg: format!(
                "header {:?} does not start with {:?}",
                headers.iter().collect::<Vec<_>>(),
                &COLUMNS[..13]
            ),
        });
    }
    let mut rows: Vec<MeasurementRecord> = rdr
        .deserialize()
        .map(|r| r.map_err(|e| csv_err(path, e)))
        .collect::<Result<_>>()?;
    let lines = head.iter().filter(|&&b| b == b'\n').count();
    let mut read = LogRead {
        rows: Vec::new(),
        cut: None,
        unterminated: false,
        whole_bytes: complete,
    };
    if !tail.iter().all(|b| b.is_ascii_whitespace()) {
        let whole = std::str::from_utf8(tail).ok().and_then(|t| {
            let mut r = csv::ReaderBuilder::new()
                .has_headers(false)
                .from_reader(t.as_bytes());
            let rec = r.records().next()?.ok()?;
            if rec.len() != headers.len() {
                return None;
            }
            let row: MeasurementRecord = rec.deserialize(Some(&headers)).ok()?;
            looks_whole(&row).then_some(row)
        });
        match whole {
            Some(row) => {
                rows.push(row);
                read.unterminated = true;
                read.whole_bytes = bytes.len();
            }
            None => {
                read.cut = Some(CutRow {
                    line: lines + 1,
                    bytes: tail.len(),
                })
            }
        }
    }
    read.rows = rows;
    Ok(read)
}

/// Reads every row (`read_log`); a last line cut short is left out.
pub fn read_rows(path: &Path) -> Result<Vec<MeasurementRecord>> {
    read_log(path).map(|l| l.rows)
}

fn csv_err(path: &Path, e: csv::Error) -> CalibrationError {
    CalibrationError::Csv {
        path: path.into(),
        msg: e.to_string(),
    }
}

/// An open measurement log, appending.
pub struct MeasurementLog {
    path: PathBuf,
    file: File,
    done: HashSet<Point>,
    repaired: Option<CutRow>,
}

impl MeasurementLog {
    /// Opens (or creates, with a header) `path`. Existing rows must come from `device`.
    /// The file is checked first and changed only once it is known good: a last line
    /// cut short by an interrupted run is then cut off (`repaired` says so), a whole
    /// last row without its newline gets one. A log that fails the checks is left as
    /// it is.
    pub fn open(path: &Path, device: &str) -> Result<MeasurementLog> {
        let exists = std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
        let mut done = HashSet::new();
        let mut repaired = None;
        let mut mend = None;
        if exists {
            let read = read_log(path)?;
            for r in &read.rows {
                if r.device != device {
                    return Err(CalibrationError::DeviceMismatch {
                        path: path.into(),
                        found: r.device.clone(),
                        expected: device.to_string(),
                    });
                }
                done.insert(r.point());
            }
            // Checked: now the repairs.
            if read.cut.is_some() || read.unterminated {
                mend = Some(read.whole_bytes);
            }
            repaired = read.cut;
            if let Some(keep) = mend {
                let f = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io_err(path))?;
                f.set_len(keep as u64)
                    .and_then(|_| f.sync_data())
                    .map_err(io_err(path))?;
            }
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io_err(path))?;
        if !exists {
            let line = format!("{}\n", COLUMNS.join(","));
            file.write_all(line.as_bytes())
                .and_then(|_| file.sync_data())
                .map_err(io_err(path))?;
        } else if mend.is_some() && repaired.is_none() {
            // A whole last row without its newline: end it.
            file.write_all(b"\n")
                .and_then(|_| file.sync_data())
                .map_err(io_err(path))?;
        }
        Ok(MeasurementLog {
            path: path.into(),
            file,
            done,
            repaired,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last line cut off when the log was opened (an interrupted run's), if any.
    pub fn repaired(&self) -> Option<&CutRow> {
        self.repaired.as_ref()
    }

    /// Whether `p` is already in the log.
    pub fn contains(&self, p: &Point) -> bool {
        self.done.contains(p)
    }

    pub fn len(&self) -> usize {
        self.done.len()
    }

    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Appends one row as a single write, then flushes and fsyncs.
    pub fn append(&mut self, row: &MeasurementRecord) -> Result<()> {
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        w.serialize(row).map_err(|e| csv_err(&self.path, e))?;
        let bytes = w.into_inner().map_err(|e| CalibrationError::Csv {
            path: self.path.clone(),
            msg: e.to_string(),
        })?;
        self.file.write_all(&bytes).map_err(io_err(&self.path))?;
        self.file.flush().map_err(io_err(&self.path))?;
        self.file.sync_data().map_err(io_err(&self.path))?;
        self.done.insert(row.point());
        Ok(())
    }
}

/// Name of the lock file `DirLock` keeps in an output directory.
pub const LOCK_FILE: &str = ".twin-calibrate.lock";

/// An exclusive lock on a calibration output directory, held while a run writes
/// there, so two runs never interleave rows in one log. It is an advisory lock
/// (`flock`) on `DIR/.twin-calibrate.lock`, which holds the owner's pid: the system
/// drops it when its process ends however it ends, and a pid left in the file by a
/// process that was killed is taken over with a message. Released (the pid cleared)
/// on drop.
pub struct DirLock {
    file: File,
}

impl DirLock {
    /// Takes the lock of `dir`, or fails naming the process that holds it. The second
    /// value says when a stale lock (a killed run's pid) was taken over.
    pub fn acquire(dir: &Path) -> Result<(DirLock, Option<String>)> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err(&path))?;
        let mut previous = String::new();
        // The pid of whoever wrote the file last (a running holder, or a killed one).
        let _ = (&mut file).take(64).read_to_string(&mut previous);
        let holder = previous.trim().parse::<u32>().ok();
        if !try_lock(&file).map_err(io_err(&path))? {
            return Err(CalibrationError::Locked {
                dir: dir.into(),
                pid: holder,
            });
        }
        let note = holder
            .filter(|&pid| pid != std::process::id())
            .map(|pid| {
                format!(
                    "took over the lock of {} from pid {pid}, which no longer holds it (a run that was killed)",
                    dir.display()
                )
            });
        file.set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .and_then(|_| file.sync_data())
            .map_err(io_err(&path))?;
        Ok((DirLock { file }, note))
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // A clean end leaves no pid behind; closing the file releases the lock.
        let _ = self.file.set_len(0);
    }
}

/// Takes an exclusive advisory lock on `f` without waiting: false when another open
/// file (another process, or another `DirLock` here) holds it.
#[cfg(unix)]
fn try_lock(f: &File) -> std::io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a file descriptor this `File` owns for the call's duration.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Without `flock`, the lock is only the pid file: taken when it is empty.
#[cfg(not(unix))]
fn try_lock(f: &File) -> std::io::Result<bool> {
    Ok(f.metadata()?.len() == 0)
}
