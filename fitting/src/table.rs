//! Rows of a published-figures table.

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{origin}: line {line}: {msg}")]
    Parse {
        origin: String,
        line: u64,
        msg: String,
    },
    #[error("{origin}: row {id}: {msg}")]
    Row {
        origin: String,
        id: String,
        msg: String,
    },
    #[error("{origin}: no rows")]
    Empty { origin: String },
}

/// Whether a row may set parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Fit,
    Check,
}

/// One published figure with the command that computes it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct PublishedFigure {
    pub id: String,
    pub figure: String,
    pub metric: String,
    pub published: f64,
    pub unit: String,
    pub role: String,
    pub command: String,
    #[serde(default)]
    pub baseline: String,
    pub source: String,
}

impl PublishedFigure {
    pub fn role(&self) -> Role {
        if self.role == "fit" {
            Role::Fit
        } else {
            Role::Check
        }
    }
}

/// Parses a table (CSV with `#` comments): every row must have a finite, non-zero
/// published value, a role of `fit` or `check`, and an id of its own.
pub fn read_table(origin: &str, text: &str) -> Result<Vec<PublishedFigure>, TableError> {
    let mut rdr = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let mut rows: Vec<PublishedFigure> = Vec::new();
    for (i, r) in rdr.deserialize::<PublishedFigure>().enumerate() {
        let row = r.map_err(|e| TableError::Parse {
            origin: origin.to_string(),
            line: e.position().map(|p| p.line()).unwrap_or(i as u64 + 2),
            msg: e.to_string(),
        })?;
        let bad = |msg: String| TableError::Row {
            origin: origin.to_string(),
            id: row.id.clone(),
            msg,
        };
        if row.role != "fit" && row.role != "check" {
            return Err(bad(format!(
                "role must be `fit` or `check`, got `{}`",
                row.role
            )));
        }
        if !row.published.is_finite() || row.published == 0.0 {
            return Err(bad(format!(
                "published value {} must be a finite, non-zero number",
                row.published
            )));
        }
        if rows.iter().any(|r| r.id == row.id) {
            return Err(bad("the id appears twice".into()));
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(TableError::Empty {
            origin: origin.to_string(),
        });
    }
    Ok(rows)
}

/// `(predicted - published) / published`.
pub fn rel_error(predicted: f64, published: f64) -> f64 {
    (predicted - published) / published
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "id,figure,metric,published,unit,role,command,baseline,source\n";

    #[test]
    fn reads_rows_and_rejects_bad_ones() {
        let ok = format!("# comment\n{HEAD}a,fig,step_ms,8.9,ms,fit,twin forward,,src\n");
        let rows = read_table("t", &ok).unwrap();
        assert_eq!(rows[0].role(), Role::Fit);
        for (bad, want) in [
            ("a,f,m,1,u,guess,c,,s\n", "role must be"),
            ("a,f,m,NaN,u,fit,c,,s\n", "finite"),
            ("a,f,m,0,u,fit,c,,s\n", "non-zero"),
            ("a,f,m,1,u,fit,c,,s\na,f,m,1,u,fit,c,,s\n", "twice"),
            ("a,f,m,x,u,fit,c,,s\n", "line 2"),
        ] {
            let e = read_table("t", &format!("{HEAD}{bad}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        assert!(read_table("t", HEAD)
            .unwrap_err()
            .to_string()
            .contains("no rows"));
        assert!((rel_error(11.0, 10.0) - 0.1).abs() < 1e-12);
    }
}
