//! `--percentiles`: which percentiles of each latency distribution a run reports, and
//! the figures read at them.
//!
//! Both lists are short and of fixed capacity ([`MAX_PERCENTILES`]): they travel in the
//! settings and the results of the control protocol, where a peer must not make this
//! end hold an unbounded list (a longer array is refused while decoding), and a fixed
//! capacity keeps the summaries that carry them `Copy`.

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use thiserror::Error;

/// The most percentiles one run reports.
pub const MAX_PERCENTILES: usize = 16;

/// What a run reports without `--percentiles`.
const DEFAULT_PERCENTILES: [f64; 4] = [50.0, 90.0, 99.0, 99.9];

/// Up to [`MAX_PERCENTILES`] items in order; encoded as an array.
#[derive(Clone, Copy)]
pub struct BoundedList<T> {
    items: [T; MAX_PERCENTILES],
    len: usize,
}

impl<T: Copy + Default> BoundedList<T> {
    /// No items.
    pub fn new() -> Self {
        BoundedList {
            items: [T::default(); MAX_PERCENTILES],
            len: 0,
        }
    }

    /// Appends `item`; false (and nothing added) when the list is full.
    pub fn push(&mut self, item: T) -> bool {
        let Some(slot) = self.items.get_mut(self.len) else {
            return false;
        };
        *slot = item;
        self.len += 1;
        true
    }
}

impl<T: Copy + Default> Default for BoundedList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> BoundedList<T> {
    /// The items, in the order they were added.
    pub fn as_slice(&self) -> &[T] {
        &self.items[..self.len]
    }
}

impl<T: Copy> BoundedList<T> {
    /// The list of `f` of each item, in the same order.
    pub fn map<U>(&self, f: impl FnMut(T) -> U) -> BoundedList<U> {
        BoundedList {
            items: self.items.map(f),
            len: self.len,
        }
    }
}

impl<T: PartialEq> PartialEq for BoundedList<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: fmt::Debug> fmt::Debug for BoundedList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl<T: Serialize> Serialize for BoundedList<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.as_slice())
    }
}

// Written by hand to match the Serialize impl above: an array of at most
// MAX_PERCENTILES items.
impl<T: JsonSchema> JsonSchema for BoundedList<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("list_of_{}", T::schema_name()).into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "array",
            "items": generator.subschema_for::<T>(),
            "maxItems": MAX_PERCENTILES,
        })
    }
}

impl<'de, T: Deserialize<'de> + Copy + Default> Deserialize<'de> for BoundedList<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de> + Copy + Default> Visitor<'de> for ListVisitor<T> {
            type Value = BoundedList<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of at most {MAX_PERCENTILES} items")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut list = BoundedList::new();
                while let Some(item) = seq.next_element()? {
                    if !list.push(item) {
                        // Refused at the first extra item: nothing more is read.
                        return Err(de::Error::invalid_length(MAX_PERCENTILES + 1, &self));
                    }
                }
                Ok(list)
            }
        }

        deserializer.deserialize_seq(ListVisitor(PhantomData))
    }
}

/// Why a list of percentiles is refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PercentilesError {
    #[error("--percentiles needs at least one percentile, e.g. 50,99,99.9")]
    Empty,
    #[error("--percentiles: {0:?} is not a number")]
    NotANumber(String),
    #[error("--percentiles: each must be above 0 and at most 100, not {0}")]
    OutOfRange(String),
    #[error("--percentiles names {0} twice")]
    Duplicate(String),
    #[error("--percentiles takes at most {MAX_PERCENTILES} percentiles, not {0}")]
    TooMany(usize),
}

/// The percentiles a run reports, in the order asked: each above 0 and at most 100, no
/// two alike.
// The bounds and uniqueness hold once `Percentiles::check` passed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(
    rename = "percentiles",
    extend(
        "minItems" = 1,
        "items" = serde_json::json!({"type": "number", "exclusiveMinimum": 0, "maximum": 100})
    )
)]
#[serde(transparent)]
pub struct Percentiles(BoundedList<f64>);

impl Default for Percentiles {
    fn default() -> Self {
        let mut list = BoundedList::new();
        for p in DEFAULT_PERCENTILES {
            list.push(p);
        }
        Percentiles(list)
    }
}

/// A list as a peer sent it, not checked yet: [`Percentiles::check`] says whether it
/// can be reported.
impl From<BoundedList<f64>> for Percentiles {
    fn from(list: BoundedList<f64>) -> Percentiles {
        Percentiles(list)
    }
}

impl From<Percentiles> for BoundedList<f64> {
    fn from(percentiles: Percentiles) -> BoundedList<f64> {
        percentiles.0
    }
}

impl Percentiles {
    /// Each percentile, in the order asked.
    pub fn as_slice(&self) -> &[f64] {
        self.0.as_slice()
    }

    /// Why this list cannot be reported, if it cannot (a peer's list is checked too).
    pub fn check(&self) -> Result<(), PercentilesError> {
        let list = self.as_slice();
        if list.is_empty() {
            return Err(PercentilesError::Empty);
        }
        for (i, &p) in list.iter().enumerate() {
            if !(p > 0.0 && p <= 100.0) {
                return Err(PercentilesError::OutOfRange(name(p)));
            }
            if list[..i].contains(&p) {
                return Err(PercentilesError::Duplicate(name(p)));
            }
        }
        Ok(())
    }
}

impl FromStr for Percentiles {
    type Err = PercentilesError;

    /// A comma-separated list such as `50,99,99.99`, checked.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let entries: Vec<&str> = text.split(',').map(str::trim).collect();
        if entries.len() > MAX_PERCENTILES {
            return Err(PercentilesError::TooMany(entries.len()));
        }
        if text.trim().is_empty() {
            return Err(PercentilesError::Empty);
        }
        let mut list = BoundedList::new();
        for entry in entries {
            let p: f64 = entry
                .parse()
                .map_err(|_| PercentilesError::NotANumber(entry.to_string()))?;
            // Fewer entries than the capacity: this always fits.
            list.push(p);
        }
        let percentiles = Percentiles(list);
        percentiles.check()?;
        Ok(percentiles)
    }
}

/// How a percentile is written in reports and column names: `50`, `99.9`, `99.99`.
pub fn name(percentile: f64) -> String {
    format!("{percentile}")
}

/// `percentile` as a quantile in [0, 1], rounded from its decimal text so that 99.9
/// reads the histogram at 0.999 exactly as written (99.9 / 100 is one step above).
pub fn quantile(percentile: f64) -> f64 {
    format!("{percentile}e-2")
        .parse()
        .unwrap_or(percentile / 100.0)
}

/// One percentile of a latency distribution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, schemars::JsonSchema, Deserialize)]
#[schemars(rename = "percentile_value")]
#[schemars(deny_unknown_fields)]
pub struct PercentileValue {
    /// Above 0 and at most 100.
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = 100))]
    pub percentile: f64,
    pub ns: u64,
}

/// The figures of a distribution at each asked percentile, in the order asked.
pub type PercentileValues = BoundedList<PercentileValue>;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<f64>, PercentilesError> {
        text.parse::<Percentiles>().map(|p| p.as_slice().to_vec())
    }

    #[test]
    fn a_list_keeps_its_order() {
        assert_eq!(parse("50,99.99").unwrap(), [50.0, 99.99]);
        assert_eq!(parse(" 99 , 1,100").unwrap(), [99.0, 1.0, 100.0]);
        assert_eq!(Percentiles::default().as_slice(), [50.0, 90.0, 99.0, 99.9]);
    }

    #[test]
    fn bad_lists_are_refused() {
        use PercentilesError::*;
        assert_eq!(parse(""), Err(Empty));
        assert_eq!(parse(" "), Err(Empty));
        assert_eq!(parse("0"), Err(OutOfRange("0".into())));
        assert_eq!(parse("100.1"), Err(OutOfRange("100.1".into())));
        assert_eq!(parse("-5"), Err(OutOfRange("-5".into())));
        assert_eq!(parse("nan"), Err(OutOfRange("NaN".into())));
        assert_eq!(parse("inf"), Err(OutOfRange("inf".into())));
        assert_eq!(parse("fifty"), Err(NotANumber("fifty".into())));
        assert_eq!(parse("50,,99"), Err(NotANumber(String::new())));
        assert_eq!(parse("50,99,50.0"), Err(Duplicate("50".into())));
        let many = vec!["1"; MAX_PERCENTILES + 1].join(",");
        assert_eq!(parse(&many), Err(TooMany(MAX_PERCENTILES + 1)));
        let most: Vec<String> = (1..=MAX_PERCENTILES).map(|p| p.to_string()).collect();
        assert_eq!(parse(&most.join(",")).unwrap().len(), MAX_PERCENTILES);
    }

    #[test]
    fn decoding_refuses_a_long_list() {
        let most: Vec<f64> = (1..=MAX_PERCENTILES).map(|p| p as f64).collect();
        let text = serde_json::to_string(&most).unwrap();
        let list: BoundedList<f64> = serde_json::from_str(&text).unwrap();
        assert_eq!(list.as_slice(), most);
        assert_eq!(
            serde_json::to_string(&Percentiles::from(list)).unwrap(),
            text
        );
        let long = format!("[{}]", vec!["1"; 10_000].join(","));
        assert!(serde_json::from_str::<BoundedList<f64>>(&long).is_err());
        assert!(serde_json::from_str::<PercentileValues>("[{\"percentile\":1}]").is_err());
    }

    #[test]
    fn quantiles_are_the_decimal_ones() {
        assert_eq!(quantile(99.9), 0.999);
        assert_eq!(quantile(99.99), 0.9999);
        assert_eq!(quantile(50.0), 0.5);
        assert_eq!(quantile(100.0), 1.0);
        assert_eq!(name(99.9), "99.9");
        assert_eq!(name(50.0), "50");
    }
}
