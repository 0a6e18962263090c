//! Plain-text tables as kubectl prints them: upper-case headers, columns
//! padded to their widest cell with three spaces between them.

/// A table of rows under `headers`.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table.
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (as many cells as headers).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether it has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row after the header line.
    pub fn render(&self) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: Vec<&str>, out: &mut String| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                text.push_str(cell);
                if i + 1 < cells.len() {
                    let pad = widths[i] + 3 - cell.chars().count();
                    text.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(self.headers.clone(), &mut out);
        for row in &self.rows {
            line(row.iter().map(String::as_str).collect(), &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_under_their_headers() {
        let mut table = Table::new(&["NAME", "PODS"]);
        table.row(vec!["orders".into(), "3".into()]);
        table.row(vec!["a".into(), "12".into()]);
        assert_eq!(table.render(), "NAME     PODS\norders   3\na        12\n");
    }
}
