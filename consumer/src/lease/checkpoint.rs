//! A lease's checkpoint as the KCL stores it in the `checkpoint` attribute:
//! a sequence number or one of the sentinels.

use std::fmt;

/// Where a shard's processing stands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    /// Nothing read yet: start at the oldest record.
    TrimHorizon,
    /// Nothing read yet: start at the newest record.
    Latest,
    /// Processed up to and including this sequence number.
    Sequence(String),
    /// Read to the end of a closed shard: never read again.
    ShardEnd,
}

impl Checkpoint {
    /// The attribute value.
    pub fn as_str(&self) -> &str {
        match self {
            Self::TrimHorizon => "TRIM_HORIZON",
            Self::Latest => "LATEST",
            Self::Sequence(sequence) => sequence,
            Self::ShardEnd => "SHARD_END",
        }
    }

    /// Parses the attribute value; unknown values (e.g. `AT_TIMESTAMP`, whose
    /// timestamp lives elsewhere) are `None` and treated as no checkpoint.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "TRIM_HORIZON" => Some(Self::TrimHorizon),
            "LATEST" => Some(Self::Latest),
            "SHARD_END" => Some(Self::ShardEnd),
            digits if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                Some(Self::Sequence(digits.to_owned()))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_sentinels_and_sequences() {
        for checkpoint in [
            Checkpoint::TrimHorizon,
            Checkpoint::Latest,
            Checkpoint::ShardEnd,
            Checkpoint::Sequence("49590338271490256608559692538361571095921575989136588898".into()),
        ] {
            assert_eq!(Checkpoint::parse(checkpoint.as_str()), Some(checkpoint));
        }
        assert_eq!(Checkpoint::parse("AT_TIMESTAMP"), None);
        assert_eq!(Checkpoint::parse(""), None);
    }
}
