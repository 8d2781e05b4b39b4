//! Builds a document's `serde_json::Value` from the YAML or JSON deserializer under a budget:
//! at most [`MAX_DEPTH`] levels of nesting, and per file at most [`MAX_VALUES`] values and
//! [`MAX_EXPANDED_BYTES`] bytes of text, YAML aliases counted every time they are used (so a
//! billion-laughs document is refused after the budget, before it fills the memory). It also
//! refuses a key given twice in one mapping, which plain `Value` silently resolves to the last.
//!
//! A refusal names the field path where it happened (`spec.containers[0].env`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::limits::{MAX_DEPTH, MAX_EXPANDED_BYTES, MAX_QUOTED, MAX_VALUES, cut, quoted};

/// What one file may still spend; shared by its documents.
#[derive(Debug)]
pub(super) struct Budget {
    values: usize,
    bytes: usize,
    path: Vec<Segment>,
    refused: Option<Refused>,
}

/// A bound crossed (or a duplicate key): where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refused {
    /// Field path, empty for the document itself.
    pub field: String,
    pub reason: String,
    /// The file's budget is spent: every further document would be refused too.
    pub exhausted: bool,
}

#[derive(Debug, Clone)]
enum Segment {
    Key(String),
    Index(usize),
}

impl Default for Budget {
    fn default() -> Self {
        Self { values: MAX_VALUES, bytes: MAX_EXPANDED_BYTES, path: Vec::new(), refused: None }
    }
}

/// Why a document could not be built: a bound of ours, or the deserializer's own error.
pub(super) enum Failure<E> {
    Refused(Refused),
    Syntax(E),
}

impl Budget {
    /// Deserializes one document's value within the budget.
    pub fn value<'de, D: Deserializer<'de>>(&mut self, de: D) -> Result<Value, Failure<D::Error>> {
        self.path.clear();
        self.refused = None;
        let result = Bounded { budget: self, depth: 0 }.deserialize(de);
        match (result, self.refused.take()) {
            (_, Some(refused)) => Err(Failure::Refused(refused)),
            (Ok(value), None) => Ok(value),
            (Err(e), None) => Err(Failure::Syntax(e)),
        }
    }

    fn field(&self) -> String {
        let mut out = String::new();
        for segment in &self.path {
            match segment {
                Segment::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&cut(k, MAX_QUOTED));
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// Records the first refusal (with the current path) and gives the error that unwinds the
    /// deserializer.
    fn refuse<E: de::Error>(&mut self, reason: String) -> E {
        self.refuse_as(reason, false)
    }

    fn refuse_as<E: de::Error>(&mut self, reason: String, exhausted: bool) -> E {
        let field = self.field();
        let message = format!("{field}: {reason}");
        self.refused.get_or_insert(Refused { field, reason, exhausted });
        E::custom(message)
    }

    fn spend_value<E: de::Error>(&mut self) -> Result<(), E> {
        match self.values.checked_sub(1) {
            Some(left) => {
                self.values = left;
                Ok(())
            }
            None => Err(self.refuse_as(
                format!(
                    "the file holds more than {MAX_VALUES} values (YAML aliases count each time \
                     they are used); refusing it"
                ),
                true,
            )),
        }
    }

    fn spend_bytes<E: de::Error>(&mut self, n: usize) -> Result<(), E> {
        match self.bytes.checked_sub(n) {
            Some(left) => {
                self.bytes = left;
                Ok(())
            }
            None => Err(self.refuse_as(
                format!(
                    "the file holds more than {MAX_EXPANDED_BYTES} bytes of text (YAML aliases \
                     count each time they are used); refusing it"
                ),
                true,
            )),
        }
    }
}

/// The seed for one value at `depth` (the document itself is depth 0).
struct Bounded<'a> {
    budget: &'a mut Budget,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        self.budget.spend_value()?;
        de.deserialize_any(self)
    }
}

impl Bounded<'_> {
    fn nest<E: de::Error>(&mut self) -> Result<(), E> {
        if self.depth >= MAX_DEPTH {
            return Err(self.budget.refuse(format!("nested more than {MAX_DEPTH} levels deep")));
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(n), _) => Ok(Value::Number(n.into())),
            (_, Ok(n)) => Ok(Value::Number(n.into())),
            _ => Err(self.budget.refuse(format!("number {v} is out of range"))),
        }
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        match u64::try_from(v) {
            Ok(n) => Ok(Value::Number(n.into())),
            Err(_) => Err(self.budget.refuse(format!("number {v} is out of range"))),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        match Number::from_f64(v) {
            Some(n) => Ok(Value::Number(n)),
            None => Err(self.budget.refuse(format!("{v} is not a finite number"))),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.spend_bytes(v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.spend_bytes(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        self.nest()?;
        let mut items = Vec::new();
        loop {
            self.budget.path.push(Segment::Index(items.len()));
            let item = seq.next_element_seed(Bounded { budget: &mut *self.budget, depth: self.depth + 1 });
            self.budget.path.pop();
            match item? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        self.nest()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key { budget: &mut *self.budget })? {
            self.budget.path.push(Segment::Key(key.clone()));
            if out.contains_key(&key) {
                let reason = format!("mapping key {} appears more than once", quoted(&key));
                return Err(self.budget.refuse(reason));
            }
            let value = map.next_value_seed(Bounded { budget: &mut *self.budget, depth: self.depth + 1 });
            self.budget.path.pop();
            out.insert(key, value?);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key: a string (YAML scalars of any type are read as their text, as `Value` does).
struct Key<'a> {
    budget: &'a mut Budget,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<String, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        self.budget.spend_bytes(v.len())?;
        Ok(v.to_string())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        self.budget.spend_bytes(v.len())?;
        Ok(v)
    }
}
