//! YAML that cannot expand beyond its size.
//!
//! A YAML alias (`*a`) stands for the whole node its anchor (`&a`) names, and a deserializer
//! replays that node at every alias: a 1 MiB file with a 300 KiB string aliased 185,000 times,
//! or a few KiB of nested aliases (the "billion laughs"), becomes gigabytes of strings, maps
//! and lists. serde_yaml_ng's own limit counts alias jumps against the document's events, not
//! what a jump replays, so it lets both through. The parser stores each scalar once and a
//! replay only hands out a borrowed `&str` again: a walk that only counts (no allocation)
//! costs one step per node it visits and stops at the budget. [`check`] runs that walk over
//! every document of the text before the real parse, and refuses the text when its expanded
//! size goes over [`expansion_limit`] of its length.

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess};
use serde::de::{VariantAccess, Visitor};

/// What a node costs beside its scalar bytes (about what a small map entry or list element
/// holds in memory once deserialized): a list of a million empty aliases is not free.
pub const NODE_COST: u64 = 16;

/// Expanded bytes always allowed, however short the text.
pub const MIN_EXPANSION: u64 = 1 << 20;

/// Expanded bytes allowed per byte of text beyond [`MIN_EXPANSION`]. A document without
/// aliases stays under it (each node takes at least two bytes of text, and costs
/// [`NODE_COST`]), so only aliases reach it.
pub const EXPANSION_PER_BYTE: u64 = 16;

/// The expanded size a text of `len` bytes may reach.
pub fn expansion_limit(len: usize) -> u64 {
    MIN_EXPANSION.saturating_add((len as u64).saturating_mul(EXPANSION_PER_BYTE))
}

/// A text whose aliases expand it beyond its budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "YAML aliases expand it beyond {limit} bytes (from {len} bytes of text); \
     refused without expanding"
)]
pub struct ExpansionError {
    /// The text's length.
    pub len: usize,
    /// The expanded size allowed.
    pub limit: u64,
}

/// Refuses `text` when any of its documents expands beyond [`expansion_limit`] (all of them
/// together count against it). Text that is not YAML passes: the real parse reports it.
pub fn check(text: &str) -> Result<(), ExpansionError> {
    let limit = expansion_limit(text.len());
    let mut budget = Budget {
        left: limit,
        exceeded: false,
    };
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        // The walk's own error only stops it; `exceeded` says whether the budget did.
        let ok = Walk(&mut budget).deserialize(doc).is_ok();
        if budget.exceeded {
            return Err(ExpansionError {
                len: text.len(),
                limit,
            });
        }
        if !ok {
            break;
        }
    }
    Ok(())
}

/// [`check`] for bytes: text that is not UTF-8 passes (the real parse refuses it).
pub fn check_bytes(bytes: &[u8]) -> Result<(), ExpansionError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => check(text),
        Err(_) => Ok(()),
    }
}

struct Budget {
    left: u64,
    exceeded: bool,
}

impl Budget {
    fn charge<E: de::Error>(&mut self, bytes: usize) -> Result<(), E> {
        let cost = NODE_COST.saturating_add(bytes as u64);
        match self.left.checked_sub(cost) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => {
                self.exceeded = true;
                Err(E::custom("expansion budget spent"))
            }
        }
    }
}

/// Visits every node of a document, charging each to the budget, keeping nothing.
struct Walk<'b>(&'b mut Budget);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.0.charge(0)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.0.charge(0)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.0.charge(0)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.0.charge(0)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.0.charge(s.len())
    }

    fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<(), E> {
        self.0.charge(b.len())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.charge(0)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.0.charge(0)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        Walk(&mut *self.0).deserialize(d)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        Walk(&mut *self.0).deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.charge(0)?;
        while seq.next_element_seed(Walk(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.charge(0)?;
        while map.next_key_seed(Walk(&mut *self.0))?.is_some() {
            map.next_value_seed(Walk(&mut *self.0))?;
        }
        Ok(())
    }

    /// A tagged node (`!tag value`): the tag, then the value.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let ((), variant) = data.variant_seed(Walk(&mut *self.0))?;
        variant.newtype_variant_seed(Walk(&mut *self.0))
    }
}

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
