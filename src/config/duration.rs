//! Durations written as people write them in YAML: `90s`, `5m`, `1h30m`, `500ms` (units `ms`,
//! `s`, `m`, `h`, `d`, one or more in any order, as Go's `time.ParseDuration` and the humantime
//! crate read them, without fractions). A bare number is refused: its unit would be a guess.

use std::time::Duration;

/// Longest text accepted: a duration written out is a few characters.
const MAX_LEN: usize = 32;

/// Parses `text`; the error says what is wrong (the caller names the key).
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s.len() > MAX_LEN {
        return Err(format!("is longer than {MAX_LEN} characters"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err("wants a number before each unit, e.g. 90s, 5m or 1h30m".into());
        }
        let (number, tail) = rest.split_at(digits);
        let n: u64 = number
            .parse()
            .map_err(|_| "has a number too large".to_string())?;
        if tail.starts_with('.') {
            return Err("has a fraction: write 1h30m, not 1.5h".into());
        }
        let unit_len = tail.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, tail) = tail.split_at(unit_len);
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => n
                .checked_mul(60)
                .map(Duration::from_secs)
                .ok_or("is too long")?,
            "h" => n
                .checked_mul(3600)
                .map(Duration::from_secs)
                .ok_or("is too long")?,
            "d" => n
                .checked_mul(86_400)
                .map(Duration::from_secs)
                .ok_or("is too long")?,
            "" => return Err("has a number without a unit (ms, s, m, h or d)".into()),
            _ => return Err("has an unknown unit (want ms, s, m, h or d)".into()),
        };
        total = total.checked_add(part).ok_or("is too long")?;
        rest = tail;
    }
    Ok(total)
}

/// `d` as [`parse`] reads it back: the largest units first (`1h30m`, `90s` stays `1m30s`).
pub fn format(d: Duration) -> String {
    let mut secs = d.as_secs();
    let millis = d.subsec_millis();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if millis > 0 || out.is_empty() {
        out.push_str(&format!("{millis}ms"));
    }
    out
}

#[cfg(test)]
#[path = "duration_tests.rs"]
mod tests;
