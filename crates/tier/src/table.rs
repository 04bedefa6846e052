//! Plain-text tables with aligned columns, as `cluster up` and `cluster status` print them.

/// A table: a header row and data rows, every row as many cells as the header.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|title| title.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are empty, extra ones dropped).
    pub fn push(&mut self, mut row: Vec<String>) {
        row.resize(self.header.len(), String::new());
        self.rows.push(row);
    }

    /// The text: columns separated by two spaces, the last one not padded.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self
            .header
            .iter()
            .map(|title| title.chars().count())
            .collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut text = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let last = row.len().saturating_sub(1);
            let mut line = String::new();
            for (index, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if index == last {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  "));
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut table = Table::new(&["ROLE", "ADDRESS"]);
        table.push(vec!["server".into(), "127.0.0.1:1".into()]);
        table.push(vec!["proxy".into()]);
        assert_eq!(
            table.render(),
            "ROLE    ADDRESS\nserver  127.0.0.1:1\nproxy\n"
        );
    }
}
