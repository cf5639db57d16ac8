//! What a misspelt name was probably meant to be: the close match among the names a
//! place accepts (`qwen3-32` -> `qwen3-32b`, `warmup` -> `warmup_s`), and the fields a
//! table of a file type accepts, read from the type's own `Deserialize` (the field list
//! serde's derive hands to `deserialize_struct`), so they never drift from the code.

use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, Visitor};
use std::cell::RefCell;
use std::fmt;

/// The closest of `candidates` to `name`: one that `name` begins (`qwen3-32` of
/// `qwen3-32b`), else the one at the smallest edit distance if it is small (at most a
/// third of the name's length, and at least 1); ties go to the first.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let name_l = name.to_ascii_lowercase();
    let candidates: Vec<&str> = candidates.into_iter().collect();
    if name_l.len() >= 3 {
        if let Some(c) = candidates
            .iter()
            .filter(|c| c.to_ascii_lowercase().starts_with(&name_l))
            .min_by_key(|c| c.len())
        {
            return Some(c);
        }
    }
    let most = (name.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(&name_l, &c.to_ascii_lowercase()), *c))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// The fields the table at `path` (keys from the file's root) of a `T` accepts, or
/// None where the path does not lead to a struct (a map, a list, an enum).
pub fn fields_of<T: DeserializeOwned>(path: &[&str]) -> Option<&'static [&'static str]> {
    let found = RefCell::new(None);
    let _ = T::deserialize(Probe {
        path,
        found: &found,
    });
    found.into_inner()
}

/// A deserializer that walks `path` through the structs a type is made of and records
/// the field list of the struct at its end; it gives no values (every walk ends in an
/// error once the list is recorded or the path leaves the structs).
struct Probe<'p, 'f> {
    path: &'p [&'p str],
    found: &'f RefCell<Option<&'static [&'static str]>>,
}

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("probe")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for Probe<'_, '_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        match self.path.split_first() {
            None => {
                *self.found.borrow_mut() = Some(fields);
                Err(Stop)
            }
            Some((key, rest)) => visitor.visit_map(OneKey {
                key: Some(key),
                value: Probe {
                    path: rest,
                    found: self.found,
                },
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf unit unit_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// A map of one key whose value is a `Probe` further down the path.
struct OneKey<'p, 'f> {
    key: Option<&'p str>,
    value: Probe<'p, 'f>,
}

impl<'de> MapAccess<'de> for OneKey<'_, '_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        match self.key.take() {
            Some(k) => seed
                .deserialize(de::value::StrDeserializer::<Stop>::new(k))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        seed.deserialize(Probe {
            path: self.value.path,
            found: self.value.found,
        })
    }
}

/// "; did you mean `x`? the fields of TABLE: a, b, c" for the unknown field at `path`
/// of a `T` (empty when the table's fields cannot be told).
pub fn unknown_field_advice<T: DeserializeOwned>(path: &str) -> String {
    let keys: Vec<&str> = path.split('.').collect();
    let Some((last, table)) = keys.split_last() else {
        return String::new();
    };
    let Some(fields) = fields_of::<T>(table) else {
        return String::new();
    };
    let mut s = String::new();
    if let Some(c) = closest(last, fields.iter().copied()) {
        s.push_str(&format!("; did you mean `{c}`?"));
    }
    let place = if table.is_empty() {
        "the file's top level".to_string()
    } else {
        format!("[{}]", table.join("."))
    };
    s.push_str(&format!("; the fields of {place}: {}", fields.join(", ")));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        max_batch_per_rank: u32,
        #[serde(rename = "tp")]
        tensor: u32,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Outer {
        warmup_s: f64,
        decode: Inner,
        prefill: Option<Inner>,
        list: Vec<Inner>,
    }

    #[test]
    fn the_fields_are_the_types_own() {
        assert_eq!(
            fields_of::<Outer>(&[]).unwrap(),
            ["warmup_s", "decode", "prefill", "list"]
        );
        assert_eq!(
            fields_of::<Outer>(&["decode"]).unwrap(),
            ["max_batch_per_rank", "tp"]
        );
        assert_eq!(
            fields_of::<Outer>(&["prefill"]).unwrap(),
            ["max_batch_per_rank", "tp"]
        );
        assert_eq!(fields_of::<Outer>(&["list"]), None);
        assert_eq!(fields_of::<Outer>(&["warmup_s"]), None);
        assert_eq!(fields_of::<Outer>(&["nothing"]), None);
    }

    #[test]
    fn close_matches_by_prefix_then_distance() {
        let models = ["qwen3-30b-a3b", "qwen3-32b", "qwen3-235b-a22b-fp8"];
        assert_eq!(closest("qwen3-32", models), Some("qwen3-32b"));
        assert_eq!(closest("Qwen3-32B", models), Some("qwen3-32b"));
        assert_eq!(closest("warmup", ["seed", "warmup_s"]), Some("warmup_s"));
        assert_eq!(closest("h10", ["h100", "h20", "h200"]), Some("h100"));
        assert_eq!(closest("gb30", ["gb200", "gb300"]), Some("gb300"));
        assert_eq!(closest("zzzzzz", models), None);
        assert!(unknown_field_advice::<Outer>("decode.max_batch")
            .starts_with("; did you mean `max_batch_per_rank`?; the fields of [decode]: max_batch_per_rank, tp"));
    }
}
