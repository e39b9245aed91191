//! Kubernetes resource quantities (`100m`, `2.5`, `128Mi`, `1G`, `1e3`) as the kubelet reads
//! them: `MilliValue()` and `Value()` round up to the next integer, like
//! k8s.io/apimachinery `resource.Quantity`.

use super::super::{err, HResult};

/// A parsed quantity: `num / den` in base units (cores, bytes), exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    num: u128,
    den: u128,
}

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity { num: 0, den: 1 };

    /// The sum (exact).
    pub fn plus(self, o: Quantity) -> Quantity {
        let (num, den) = (self.num * o.den + o.num * self.den, self.den * o.den);
        let g = gcd(num, den).max(1);
        Quantity {
            num: num / g,
            den: den / g,
        }
    }

    /// The larger of the two.
    pub fn max(self, o: Quantity) -> Quantity {
        if self.num * o.den >= o.num * self.den {
            self
        } else {
            o
        }
    }

    /// Adds to a `(num, den)` accumulator.
    pub fn add_to(self, acc: (u128, u128)) -> (u128, u128) {
        let s = Quantity {
            num: acc.0,
            den: acc.1,
        }
        .plus(self);
        (s.num, s.den)
    }

    /// Parses `<decimal><suffix>` with the suffixes of the Kubernetes quantity grammar: binary
    /// `Ki Mi Gi Ti Pi Ei`, decimal `n u m "" k M G T P E`, or an exponent `e<N>` / `E<N>`.
    /// Negative quantities are refused (no request or limit can be negative).
    pub fn parse(s: &str) -> HResult<Self> {
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, suffix) = s.split_at(split);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if (int.is_empty() && frac.is_empty()) || int.len() + frac.len() > 24 {
            return err(format!("quantity {s:?}: no number (or too many digits)"));
        }
        let digits = format!("{int}{frac}");
        let mut num: u128 = digits
            .parse()
            .map_err(|e| super::super::HarnessError(format!("quantity {s:?}: {e}")))?;
        let mut den: u128 = 10u128.pow(frac.len() as u32);
        let (bin, dec): (u32, i32) = match suffix {
            "Ki" => (10, 0),
            "Mi" => (20, 0),
            "Gi" => (30, 0),
            "Ti" => (40, 0),
            "Pi" => (50, 0),
            "Ei" => (60, 0),
            "n" => (0, -9),
            "u" => (0, -6),
            "m" => (0, -3),
            "" => (0, 0),
            "k" => (0, 3),
            "M" => (0, 6),
            "G" => (0, 9),
            "T" => (0, 12),
            "P" => (0, 15),
            "E" => (0, 18),
            e if e.starts_with(['e', 'E']) => match e[1..].parse::<i32>() {
                Ok(x) if (-18..=18).contains(&x) => (0, x),
                _ => return err(format!("quantity {s:?}: bad exponent")),
            },
            _ => return err(format!("quantity {s:?}: unknown suffix {suffix:?}")),
        };
        num <<= bin;
        if dec >= 0 {
            num *= 10u128.pow(dec as u32);
        } else {
            den *= 10u128.pow((-dec) as u32);
        }
        Ok(Self { num, den })
    }

    /// The value in thousandths, rounded up (`MilliValue()`): CPU in millicores.
    pub fn milli(&self) -> i64 {
        i64::try_from((self.num * 1000).div_ceil(self.den)).unwrap_or(i64::MAX)
    }

    /// The value rounded up (`Value()`): memory and hugepages in bytes.
    pub fn value(&self) -> i64 {
        i64::try_from(self.num.div_ceil(self.den)).unwrap_or(i64::MAX)
    }

    /// Whether it is zero.
    pub fn is_zero(&self) -> bool {
        self.num == 0
    }
}

/// Parses or panics with the input (builder arguments are test constants).
pub fn q(s: &str) -> Quantity {
    match Quantity::parse(s) {
        Ok(q) => q,
        Err(e) => panic!("{e}"),
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}
