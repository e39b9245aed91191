//! Kubernetes quantities (`k8s.io/apimachinery/pkg/api/resource`): the canonical strings
//! nri-align writes (counts as plain integers, bytes with the largest exact binary suffix, as
//! `resource.NewQuantity(n, BinarySI).String()` prints them) and a parser for reading back what
//! is on the server (any suffix, decimals, exponents; `Value()` semantics: rounded up).

use serde::{Deserialize, Deserializer};

const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// A count (CPUs, devices): `4`.
pub fn count(n: u64) -> String {
    n.to_string()
}

/// An amount of bytes in canonical BinarySI form: `512Mi`, `1Gi`, `1536` (not a multiple of
/// 1024), `0`.
pub fn bytes(n: u64) -> String {
    let (mut v, mut i) = (n, 0);
    while v != 0 && v % 1024 == 0 && i + 1 < BINARY_SUFFIXES.len() {
        v /= 1024;
        i += 1;
    }
    format!("{v}{}", BINARY_SUFFIXES[i])
}

/// The integer value of a quantity string, rounded up as Go's `Quantity.Value()` does
/// (`100m` -> 1, `1.5Gi` -> 1610612736, `2e3` -> 2000). `None` when the text is not a quantity
/// or the value does not fit an `i128`.
pub fn parse(text: &str) -> Option<i128> {
    let s = text.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(num_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return None;
    }
    // The number as digits / 10^scale.
    let digits = format!("{int_part}{frac_part}");
    if digits.len() > 30 {
        return None;
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let mut scale = frac_part.len() as i32;
    // Multiplier from the suffix: base 2 (Ki..Ei), base 10 (n..E) or an exponent.
    let mut binary_shift = 0u32;
    match suffix {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let i = BINARY_SUFFIXES.iter().position(|x| *x == suffix)?;
            binary_shift = 10 * i as u32;
        }
        "n" => scale += 9,
        "u" => scale += 6,
        "m" => scale += 3,
        "k" => scale -= 3,
        "M" => scale -= 6,
        "G" => scale -= 9,
        "T" => scale -= 12,
        "P" => scale -= 15,
        "E" => scale -= 18,
        e => {
            let exp = e.strip_prefix('e').or_else(|| e.strip_prefix('E'))?;
            let exp: i32 = exp.parse().ok()?;
            if !(-40..=40).contains(&exp) {
                return None;
            }
            scale -= exp;
        }
    }
    let mut value = mantissa.checked_mul(1i128.checked_shl(binary_shift)?)?;
    if scale < 0 {
        value = value.checked_mul(10i128.checked_pow(scale.unsigned_abs())?)?;
    } else if scale > 0 {
        let div = 10i128.checked_pow(scale as u32)?;
        // Round away from zero, as Value() rounds up.
        value = (value + div - 1) / div;
    }
    Some(if neg { -value } else { value })
}

/// Reads a quantity that may be written as a JSON string or number (the CRD marks them
/// `x-kubernetes-int-or-string`) into its string form.
pub fn de_int_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IntOrString {
        Int(i64),
        Float(f64),
        Str(String),
    }
    Ok(match IntOrString::deserialize(d)? {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::Float(f) => f.to_string(),
        IntOrString::Str(s) => s,
    })
}

#[cfg(test)]
#[path = "quantity_tests.rs"]
mod tests;
