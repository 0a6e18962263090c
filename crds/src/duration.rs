//! Go-style duration strings (`30s`, `1m30s`, `250ms`, `2h`) as used in the
//! ShardGroup spec: the one parser of those strings, so the controller never
//! parses spec text itself. The accepted grammar is exactly the schema's
//! [`DURATION_PATTERN`]: one or more `<digits><unit>` terms with units `ms`,
//! `s`, `m`, `h` (no sign, no fractions, no spaces), which is a subset of Go's
//! `time.ParseDuration` and of CEL's `duration()`.

use std::time::Duration;

/// Regular expression every duration field of the spec must match (also used
/// as the CRD schema `pattern` and in the CEL rules).
pub const DURATION_PATTERN: &str = "^([0-9]+(ms|s|m|h))+$";

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string was empty.
    #[error("empty duration: use a value such as 30s, 1m30s or 250ms")]
    Empty,
    /// A term had no digits before its unit, or the string had other characters.
    #[error("invalid duration {0:?}: expected terms like 30s, 1m30s or 250ms (units ms, s, m, h)")]
    Syntax(String),
    /// Digits without a unit, or an unknown unit.
    #[error("invalid duration {0:?}: every number needs a unit: ms, s, m or h")]
    Unit(String),
    /// The value does not fit in a `std::time::Duration`.
    #[error("duration {0:?} is too large")]
    Overflow(String),
    /// The value is zero where a positive duration is required.
    #[error("duration {0:?} must be greater than zero")]
    NotPositive(String),
}

/// Parses a Go-style duration such as `1m30s` into a [`Duration`].
///
/// Zero (`0s`) is accepted; use [`parse_positive_duration`] where zero makes no
/// sense.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let bytes = text.as_bytes();
    let mut total = Duration::ZERO;
    let mut i = 0;
    while i < bytes.len() {
        let digits_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == digits_start {
            return Err(DurationError::Syntax(text.to_owned()));
        }
        let number: u64 = text[digits_start..i]
            .parse()
            .map_err(|_| DurationError::Overflow(text.to_owned()))?;
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let term = match &text[unit_start..i] {
            "ms" => Some(Duration::from_millis(number)),
            "s" => Some(Duration::from_secs(number)),
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "h" => number.checked_mul(3600).map(Duration::from_secs),
            "" if i < bytes.len() => return Err(DurationError::Syntax(text.to_owned())),
            _ => return Err(DurationError::Unit(text.to_owned())),
        };
        total = term
            .and_then(|t| total.checked_add(t))
            .ok_or_else(|| DurationError::Overflow(text.to_owned()))?;
    }
    Ok(total)
}

/// Parses a duration that must be greater than zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, DurationError> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err(DurationError::NotPositive(text.to_owned()));
    }
    Ok(duration)
}

/// Formats a duration in the same grammar (`1h2m3s`, `250ms`, `0s`), the inverse
/// of [`parse_duration`] for whole milliseconds.
pub fn format_duration(duration: Duration) -> String {
    let mut millis = duration.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        if millis >= size {
            out.push_str(&format!("{}{unit}", millis / size));
            millis %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_compound_terms() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(
            parse_duration("1h2m3s4ms"),
            Ok(Duration::from_millis(3_723_004))
        );
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        // Go accepts repeated units too; they add up.
        assert_eq!(parse_duration("1m1m"), Ok(Duration::from_secs(120)));
    }

    #[test]
    fn refuses_what_the_schema_pattern_refuses() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(parse_duration("30"), Err(DurationError::Unit("30".into())));
        assert_eq!(parse_duration("s"), Err(DurationError::Syntax("s".into())));
        assert_eq!(
            parse_duration("1.5s"),
            Err(DurationError::Syntax("1.5s".into()))
        );
        assert_eq!(
            parse_duration("-1s"),
            Err(DurationError::Syntax("-1s".into()))
        );
        assert_eq!(
            parse_duration("1 s"),
            Err(DurationError::Syntax("1 s".into()))
        );
        assert_eq!(
            parse_duration("10d"),
            Err(DurationError::Unit("10d".into()))
        );
        assert_eq!(
            parse_duration("5us"),
            Err(DurationError::Unit("5us".into()))
        );
        assert_eq!(
            parse_duration("1m30"),
            Err(DurationError::Unit("1m30".into()))
        );
    }

    #[test]
    fn refuses_overflow() {
        let huge = format!("{}h", u64::MAX);
        assert_eq!(
            parse_duration(&huge),
            Err(DurationError::Overflow(huge.clone()))
        );
        let too_many_digits = "99999999999999999999999s";
        assert_eq!(
            parse_duration(too_many_digits),
            Err(DurationError::Overflow(too_many_digits.into()))
        );
    }

    #[test]
    fn positive_refuses_zero() {
        assert_eq!(
            parse_positive_duration("0ms"),
            Err(DurationError::NotPositive("0ms".into()))
        );
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
    }

    #[test]
    fn format_round_trips() {
        for text in ["0s", "250ms", "30s", "1m30s", "2h", "1h2m3s4ms"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }

    proptest::proptest! {
        #[test]
        fn format_then_parse_is_identity(millis in 0u64..1_000_000_000_000) {
            let duration = Duration::from_millis(millis);
            proptest::prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }

        #[test]
        fn terms_add_up(h in 0u64..1000, m in 0u64..1000, s in 0u64..1000, ms in 0u64..1000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let expected = Duration::from_millis(((h * 60 + m) * 60 + s) * 1000 + ms);
            proptest::prop_assert_eq!(parse_duration(&text), Ok(expected));
        }

        #[test]
        fn never_panics(text in "\\PC{0,12}") {
            let _ = parse_duration(&text);
        }
    }
}
