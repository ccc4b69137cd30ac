//! Line and field reading shared by the HPCC file parsers: every error
//! names the file and the 1-based line.

use std::path::{Path, PathBuf};
use std::str::{FromStr, SplitWhitespace};

use super::{HpccError, ParseReason};

/// The non-blank lines of a file, numbered from 1.
pub(crate) struct Cursor<'a> {
    path: &'a Path,
    lines: std::iter::Enumerate<std::str::Lines<'a>>,
    /// Line number of the last line returned (0 before the first).
    last: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str, path: &'a Path) -> Cursor<'a> {
        Cursor { path, lines: text.lines().enumerate(), last: 0 }
    }

    /// The next non-blank line, or `None` at the end.
    pub fn next_opt(&mut self) -> Option<Fields<'a>> {
        for (i, line) in self.lines.by_ref() {
            if !line.trim().is_empty() {
                self.last = i + 1;
                return Some(Fields { path: self.path, line: i + 1, it: line.split_whitespace() });
            }
        }
        None
    }

    /// The next non-blank line; `what` names it in the error at the end.
    pub fn next(&mut self, what: &'static str) -> Result<Fields<'a>, HpccError> {
        match self.next_opt() {
            Some(f) => Ok(f),
            None => Err(parse_error(self.path, self.last + 1, ParseReason::UnexpectedEof(what))),
        }
    }
}

/// The whitespace-separated fields of one line.
pub(crate) struct Fields<'a> {
    path: &'a Path,
    pub line: usize,
    it: SplitWhitespace<'a>,
}

impl<'a> Fields<'a> {
    pub fn err(&self, reason: ParseReason) -> HpccError {
        parse_error(self.path, self.line, reason)
    }

    /// The next field, which must be there.
    pub fn next(&mut self, field: &'static str) -> Result<&'a str, HpccError> {
        match self.it.next() {
            Some(s) => Ok(s),
            None => Err(self.err(ParseReason::MissingField(field))),
        }
    }

    /// The next field, read by `f`; `expected` describes a good value.
    pub fn with<T>(
        &mut self,
        field: &'static str,
        expected: &'static str,
        f: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, HpccError> {
        let s = self.next(field)?;
        f(s).ok_or_else(|| self.err(ParseReason::BadValue { field, value: s.to_string(), expected }))
    }

    /// The next field through `FromStr`.
    pub fn parse<T: FromStr>(&mut self, field: &'static str, expected: &'static str) -> Result<T, HpccError> {
        self.with(field, expected, |s| s.parse().ok())
    }

    /// The fields not read yet, joined by single spaces.
    pub fn rest(&mut self) -> String {
        self.it.by_ref().collect::<Vec<_>>().join(" ")
    }

    /// Checks that no field is left.
    pub fn end(mut self) -> Result<(), HpccError> {
        match self.it.next() {
            None => Ok(()),
            Some(s) => Err(self.err(ParseReason::ExtraField(s.to_string()))),
        }
    }
}

pub(crate) fn parse_error(path: &Path, line: usize, reason: ParseReason) -> HpccError {
    HpccError::Parse { path: PathBuf::from(path), line, reason }
}

/// Reads a whole file as text.
pub(crate) fn read_text(path: &Path) -> Result<String, HpccError> {
    std::fs::read_to_string(path).map_err(|source| HpccError::Io { path: path.to_path_buf(), source })
}
