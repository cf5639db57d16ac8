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
pub struct Row {
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

impl Row {
    pub fn from_measurement(m: &Measurement, device: &str, driver: &str, timestamp: &str) -> Row {
        Row {
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

/// Reads every row. A final line cut short by an interrupted write is ignored.
pub fn read_rows(path: &Path) -> Result<Vec<Row>> {
    let mut text = String::new();
    File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(io_err(path))?;
    if !text.ends_with('\n') {
        if let Some(i) = text.rfind('\n') {
            text.truncate(i + 1);
        }
    }
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(text.as_bytes());
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
    rdr.deserialize()
        .map(|r| r.map_err(|e| csv_err(path, e)))
        .collect()
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
}

impl MeasurementLog {
    /// Opens (or creates, with a header) `path`. Existing rows must come from `device`.
    /// A partial last line from an interrupted run is cut off.
    pub fn open(path: &Path, device: &str) -> Result<MeasurementLog> {
        if path.exists() {
            truncate_partial_line(path)?;
        }
        let exists = std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
        let mut done = HashSet::new();
        if exists {
            for r in read_rows(path)? {
                if r.device != device {
                    return Err(CalibrationError::DeviceMismatch {
                        path: path.into(),
                        found: r.device,
                        expected: device.to_string(),
                    });
                }
                done.insert(r.point());
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
        }
        Ok(MeasurementLog {
            path: path.into(),
            file,
            done,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
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
    pub fn append(&mut self, row: &Row) -> Result<()> {
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

fn truncate_partial_line(path: &Path) -> Result<()> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(io_err(path))?;
    if buf.last() != Some(&b'\n') {
        let keep = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        f.set_len(keep as u64).map_err(io_err(path))?;
        f.seek(SeekFrom::End(0)).map_err(io_err(path))?;
        f.sync_data().map_err(io_err(path))?;
    }
    Ok(())
}
