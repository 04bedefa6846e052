//! Markdown tables, the one way every report writes them.
//!
//! ```text
//!   Table::new([("rate", Align::Right), ("system", Align::Left)])
//!       .row(["10000", "memcached"])          one cell per column
//!       .render()  ──>  | rate | system |
//!                       |---:|---|
//!                       | 10000 | memcached |
//! ```
//!
//! A cell is written as ` text |`; an empty cell as ` |`, so a row of a failed point
//! (`| 10000 | failed | | |`) reads as the reports have always written it; a table whose
//! empty cells keep both spaces (`|  |`) says so with [`Table::padding_empty_cells`].

use std::fmt::Write;

/// How a column's cells are aligned (the separator row: `---` or `---:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Left (`---`).
    Left,
    /// Right (`---:`), for numbers.
    Right,
}

impl Align {
    fn separator(self) -> &'static str {
        match self {
            Align::Left => "---",
            Align::Right => "---:",
        }
    }
}

/// A markdown table: a header with alignments and rows of cells.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
    pad_empty: bool,
}

impl Table {
    /// A table with the columns `(title, alignment)`.
    pub fn new<Title: Into<String>>(columns: impl IntoIterator<Item = (Title, Align)>) -> Self {
        let (header, align) = columns
            .into_iter()
            .map(|(title, align)| (title.into(), align))
            .unzip();
        Self {
            header,
            align,
            rows: Vec::new(),
            pad_empty: false,
        }
    }

    /// A table whose columns are all aligned `align`.
    pub fn aligned<Title: Into<String>>(
        titles: impl IntoIterator<Item = Title>,
        align: Align,
    ) -> Self {
        Self::new(titles.into_iter().map(|title| (title, align)))
    }

    /// Writes the empty cells of the rows with both their spaces (`|  |`), as a column that is
    /// mostly blank (a mark on a few rows) has always been written; the header keeps ` |`.
    #[must_use]
    pub fn padding_empty_cells(mut self) -> Self {
        self.pad_empty = true;
        self
    }

    /// Appends a row (cells beyond the header's columns are written too; missing ones are not).
    pub fn row<Cell: Into<String>>(mut self, cells: impl IntoIterator<Item = Cell>) -> Self {
        self.push(cells);
        self
    }

    /// Appends a row in place.
    pub fn push<Cell: Into<String>>(&mut self, cells: impl IntoIterator<Item = Cell>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// How many rows the table holds (the header not counted).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table holds no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The header, the separator and the rows, each line ending in a newline.
    pub fn render(&self) -> String {
        let mut text = String::new();
        text.push_str(&line(&self.header));
        text.push('|');
        for align in &self.align {
            let _ = write!(text, "{}|", align.separator());
        }
        text.push('\n');
        for row in &self.rows {
            if self.pad_empty {
                text.push('|');
                for cell in row {
                    let _ = write!(text, " {cell} |");
                }
                text.push('\n');
            } else {
                text.push_str(&line(row));
            }
        }
        text
    }
}

/// One row: `| a | b |` and a newline (` |` for an empty cell).
pub fn line<Cell: AsRef<str>>(cells: &[Cell]) -> String {
    let mut text = String::from("|");
    for cell in cells {
        let cell = cell.as_ref();
        if cell.is_empty() {
            text.push_str(" |");
        } else {
            let _ = write!(text, " {cell} |");
        }
    }
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::{line, Align, Table};

    #[test]
    fn renders_header_separator_and_rows() {
        let table = Table::new([("rate", Align::Right), ("system", Align::Left)])
            .row(["10000", "memcached"])
            .row(["20000", ""]);
        assert_eq!(
            table.render(),
            "| rate | system |\n|---:|---|\n| 10000 | memcached |\n| 20000 | |\n"
        );
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn padded_rows_keep_both_spaces_of_an_empty_cell() {
        let table = Table::new([("rate", Align::Right), ("", Align::Left)])
            .padding_empty_cells()
            .row(["10000", ""])
            .row(["20000", "*few*"]);
        assert_eq!(
            table.render(),
            "| rate | |\n|---:|---|\n| 10000 |  |\n| 20000 | *few* |\n"
        );
    }

    #[test]
    fn an_empty_cell_is_one_space() {
        assert_eq!(line(&["1", "failed", "", ""]), "| 1 | failed | | |\n");
    }
}
