//! Deserialising a scenario file with every problem collected: every unknown field
//! (`serde_ignored`), and every type error, not only the first. `serde` stops at the
//! first error (`serde_path_to_error` says where); to find the next one the bad value
//! is replaced by a placeholder of a type the field accepts and the file is read again,
//! at most `MAX_TYPE_ERRORS` times.

use serde::de::DeserializeOwned;
use spec::problem::Problem;
use std::collections::BTreeSet;

/// Type errors reported per file, at most (each costs one more read of the file).
pub const MAX_TYPE_ERRORS: usize = 20;

type PathError = serde_path_to_error::Error<toml::de::Error>;

/// One read: the value, or the first error; unknown field paths are added to `unknown`.
fn read<T: DeserializeOwned>(
    value: &toml::Value,
    unknown: &mut BTreeSet<String>,
) -> Result<T, PathError> {
    // serde_ignored marks Option levels with `?`; field paths do not have them.
    let mut on_unknown = |path: serde_ignored::Path<'_>| {
        let text = path.to_string();
        let p: Vec<&str> = text.split('.').filter(|s| *s != "?").collect();
        unknown.insert(p.join("."));
    };
    let de = serde_ignored::Deserializer::new(value.clone(), &mut on_unknown);
    serde_path_to_error::deserialize(de)
}

/// Where an error is, as keys and indices into the TOML value (None: a place the
/// placeholder search cannot address).
fn steps(e: &PathError) -> Option<Vec<Step>> {
    use serde_path_to_error::Segment;
    e.path()
        .iter()
        .map(|s| match s {
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Seq { index } => Some(Step::Index(*index)),
            _ => None,
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// The value at `path` (created as an empty table's entry if its parent exists).
fn slot<'v>(root: &'v mut toml::Value, path: &[Step]) -> Option<&'v mut toml::Value> {
    let (last, parents) = path.split_last()?;
    let mut cur = root;
    for s in parents {
        cur = match (cur, s) {
            (toml::Value::Table(t), Step::Key(k)) => t.get_mut(k)?,
            (toml::Value::Array(a), Step::Index(i)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    match (cur, last) {
        (toml::Value::Table(t), Step::Key(k)) => {
            Some(t.entry(k.clone()).or_insert(toml::Value::Boolean(false)))
        }
        (toml::Value::Array(a), Step::Index(i)) => a.get_mut(*i),
        _ => None,
    }
}

/// The field a "missing field `x`" message names.
fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_string())
}

/// Deserialises `value` as a `T`, with every unknown field and up to
/// `MAX_TYPE_ERRORS` type errors as problems (empty, and the value, when it is valid).
pub fn deserialize_all<T: DeserializeOwned>(mut value: toml::Value) -> (Option<T>, Vec<Problem>) {
    let mut unknown = BTreeSet::new();
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut first = None;
    for _ in 0..MAX_TYPE_ERRORS {
        let e = match read::<T>(&value, &mut unknown) {
            Ok(v) => {
                if errors.is_empty() {
                    first = Some(v);
                }
                break;
            }
            Err(e) => e,
        };
        let message = e.inner().message().to_string();
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        if errors.contains(&(path.clone(), message.clone())) {
            break;
        }
        errors.push((path, message.clone()));
        // Replace the bad value (or add the missing one) and read again.
        let Some(mut at) = steps(&e) else { break };
        if let Some(field) = missing_field(&message) {
            at.push(Step::Key(field));
        }
        if !patch::<T>(&mut value, &at, &mut unknown) {
            break;
        }
    }
    let mut problems: Vec<Problem> = unknown
        .into_iter()
        .map(|u| {
            let advice = super::fields::unknown_field_advice::<T>(&u);
            Problem::new(u, format!("unknown field{advice}"))
        })
        .collect();
    problems.extend(errors.into_iter().map(|(p, m)| Problem::new(p, m)));
    (first, problems)
}

/// Puts at `at` the first placeholder that moves the first error elsewhere.
fn patch<T: DeserializeOwned>(
    value: &mut toml::Value,
    at: &[Step],
    unknown: &mut BTreeSet<String>,
) -> bool {
    let candidates = [
        toml::Value::Integer(1),
        toml::Value::Float(1.0),
        toml::Value::Boolean(false),
        toml::Value::String("1".into()),
        toml::Value::Array(Vec::new()),
        toml::Value::Table(Default::default()),
    ];
    for c in candidates {
        let mut trial = value.clone();
        let Some(v) = slot(&mut trial, at) else {
            return false;
        };
        *v = c;
        let moved = match read::<T>(&trial, unknown) {
            Ok(_) => true,
            Err(e) => {
                let mut place = steps(&e).unwrap_or_default();
                if let Some(f) = missing_field(e.inner().message()) {
                    place.push(Step::Key(f));
                }
                place != at
            }
        };
        if moved {
            *value = trial;
            return true;
        }
    }
    false
}
