//! A walk over a map's entries sorted by key, asked for keys that never
//! decrease: the merge join of two sorted sequences (the shards of a
//! topology and the engine's assignment or the published records; a
//! plan's pods and the document's pod lists), without a map lookup per
//! key.

/// The entries of a sorted iterator, looked up in key order.
pub(crate) struct SortedCursor<'a, V: 'a, I: Iterator<Item = (&'a String, &'a V)>> {
    entries: std::iter::Peekable<I>,
}

impl<'a, V: 'a, I: Iterator<Item = (&'a String, &'a V)>> SortedCursor<'a, V, I> {
    pub(crate) fn new(entries: I) -> Self {
        Self {
            entries: entries.peekable(),
        }
    }

    /// The value at `key`; keys asked must not decrease.
    pub(crate) fn get(&mut self, key: &str) -> Option<&'a V> {
        while let Some((at, value)) = self.entries.peek() {
            match at.as_str().cmp(key) {
                std::cmp::Ordering::Less => {
                    self.entries.next();
                }
                // Not consumed: a repeated key is answered again.
                std::cmp::Ordering::Equal => return Some(*value),
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }
}
