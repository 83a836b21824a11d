//! GRUB's configuration as `grub-mkconfig` reads it: `/etc/default/grub`, then each
//! `/etc/default/grub.d/*.cfg` in name order, sourced by `/bin/sh` one after the other; the
//! kernel line of the generated `grub.cfg` is `GRUB_CMDLINE_LINUX` then
//! `GRUB_CMDLINE_LINUX_DEFAULT` (10_linux's `linux_entry ... "${GRUB_CMDLINE_LINUX}
//! ${GRUB_CMDLINE_LINUX_DEFAULT}"`), split at white space by GRUB when it boots.
//!
//! Only what those files do to the variables is modelled: `NAME=value` and `export
//! NAME=value` with double, single and no quotes, backslashes, `$NAME` and `${NAME}` of any
//! variable assigned before (an unset one is empty, as in the shell). Every character of a
//! value remembers the file and byte it was written at, so that each word of the kernel line
//! names the file and line it comes from, and a word written as one literal run can be
//! replaced in place. A command substitution (`$(...)`, backquotes) is not run: it counts as
//! empty, and the assignment is listed in [`Model::not_understood`].

use std::collections::HashMap;

use crate::error::Result;
use crate::sysroot::SysRoot;

/// GRUB's defaults, sourced first.
pub const DEFAULT_GRUB: &str = "/etc/default/grub";
/// The directory whose `*.cfg` files are sourced after [`DEFAULT_GRUB`], in name order.
pub const GRUB_D: &str = "/etc/default/grub.d";
/// The arguments of every entry, recovery ones included; first on the kernel line.
pub const CMDLINE_LINUX: &str = "GRUB_CMDLINE_LINUX";
/// The arguments of the default (non-recovery) entries; after [`CMDLINE_LINUX`].
pub const CMDLINE_LINUX_DEFAULT: &str = "GRUB_CMDLINE_LINUX_DEFAULT";

/// One file `grub-mkconfig` sources: its path (below the root) and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Absolute path below the root (`/etc/default/grub`).
    pub path: String,
    /// Its content.
    pub text: String,
}

/// Whether `path` is one of the files `grub-mkconfig` sources: [`DEFAULT_GRUB`] or a
/// `*.cfg` directly in [`GRUB_D`].
pub fn is_source_path(path: &str) -> bool {
    if path == DEFAULT_GRUB {
        return true;
    }
    path.strip_prefix(GRUB_D)
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(|name| {
            name.len() > ".cfg".len()
                && name.ends_with(".cfg")
                && !name.contains('/')
                && !name.starts_with('.')
        })
}

/// The files `grub-mkconfig` sources below `root`, in its order: [`DEFAULT_GRUB`] (when it
/// exists), then every `*.cfg` of [`GRUB_D`] sorted by name byte by byte (the shell's glob
/// in the C locale, which is how update-grub runs on Debian).
pub fn sources(root: &SysRoot) -> Result<Vec<Source>> {
    let mut out = Vec::new();
    if let Some(text) = read_opt(root, DEFAULT_GRUB)? {
        out.push(Source {
            path: DEFAULT_GRUB.into(),
            text,
        });
    }
    let mut names: Vec<String> = match root.read_dir_names(GRUB_D) {
        Ok(n) => n
            .into_iter()
            .filter(|n| is_source_path(&format!("{GRUB_D}/{n}")))
            .collect(),
        Err(e) if e.errno() == Some(libc::ENOENT) => Vec::new(),
        Err(e) => return Err(e),
    };
    names.sort();
    for n in names {
        let path = format!("{GRUB_D}/{n}");
        if let Some(text) = read_opt(root, &path)? {
            out.push(Source { path, text });
        }
    }
    Ok(out)
}

fn read_opt(root: &SysRoot, path: &str) -> Result<Option<String>> {
    match root.read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `sources` with the file at `path` given `text` (added in name order when it is not
/// there): what `grub-mkconfig` would read once `path` is written.
pub fn with_file(sources: &[Source], path: &str, text: &str) -> Vec<Source> {
    let mut out: Vec<Source> = sources.iter().filter(|s| s.path != path).cloned().collect();
    out.push(Source {
        path: path.into(),
        text: text.into(),
    });
    // /etc/default/grub first, then grub.d by name.
    out.sort_by(|a, b| (a.path != DEFAULT_GRUB, &a.path).cmp(&(b.path != DEFAULT_GRUB, &b.path)));
    out
}

/// One word of the kernel line, with where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The word (`isolcpus=1`).
    pub text: String,
    /// The file its first character was written in.
    pub file: String,
    /// The line of that file (from 1).
    pub line: usize,
    /// The variable whose assignment holds it as written (`GRUB_CMDLINE_LINUX_DEFAULT`).
    pub var: String,
    /// The bytes of the file that spell it, when it is written there as one literal run
    /// (no quote, escape or expansion inside it): what can be replaced in place.
    pub span: Option<(usize, usize)>,
}

impl Word {
    /// `file:line (VAR)`, for messages.
    pub fn whence(&self) -> String {
        format!("{}:{} ({})", self.file, self.line, self.var)
    }
}

/// The kernel line `grub-mkconfig` makes of the sources.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Model {
    /// Its words, `GRUB_CMDLINE_LINUX`'s then `GRUB_CMDLINE_LINUX_DEFAULT`'s.
    pub words: Vec<Word>,
    /// Every assignment of `GRUB_CMDLINE_LINUX_DEFAULT`, in the order run: file and line.
    pub default_assignments: Vec<(String, usize)>,
    /// Assignments of the two variables with a command substitution (not run: empty).
    pub not_understood: Vec<(String, usize)>,
}

#[derive(Debug, Clone, Copy)]
struct At {
    file: usize,
    offset: usize,
    var: usize,
}

#[derive(Debug, Clone, Copy)]
struct Ch {
    c: char,
    at: Option<At>,
}

/// The kernel line the sources make, as [`Model`].
pub fn model(sources: &[Source]) -> Model {
    let mut vars: HashMap<String, Vec<Ch>> = HashMap::new();
    let mut var_names: Vec<String> = Vec::new();
    let mut m = Model::default();
    for (fi, s) in sources.iter().enumerate() {
        let mut p = Parser {
            text: &s.text,
            pos: 0,
            file: fi,
        };
        while let Some((name, start, value, substituted)) = p.next_assignment(&vars, &mut var_names)
        {
            let line = line_of(&s.text, start);
            if name == CMDLINE_LINUX_DEFAULT {
                m.default_assignments.push((s.path.clone(), line));
            }
            if substituted && (name == CMDLINE_LINUX || name == CMDLINE_LINUX_DEFAULT) {
                m.not_understood.push((s.path.clone(), line));
            }
            vars.insert(name, value);
        }
    }
    let empty = Vec::new();
    let mut all: Vec<Ch> = vars.get(CMDLINE_LINUX).unwrap_or(&empty).clone();
    all.push(Ch { c: ' ', at: None });
    all.extend(vars.get(CMDLINE_LINUX_DEFAULT).unwrap_or(&empty));
    for w in all.split(|c| c.c.is_whitespace()).filter(|w| !w.is_empty()) {
        let text: String = w.iter().map(|c| c.c).collect();
        let (file, line, var) = match w[0].at {
            Some(a) => (
                sources[a.file].path.clone(),
                line_of(&sources[a.file].text, a.offset),
                var_names.get(a.var).cloned().unwrap_or_default(),
            ),
            None => (String::new(), 0, String::new()),
        };
        let span = literal_span(w);
        m.words.push(Word {
            text,
            file,
            line,
            var,
            span,
        });
    }
    m
}

/// `text` with each `(start, end, new)` of `edits` (byte ranges of `text`, not overlapping)
/// replaced by `new`.
pub fn replace_spans(text: &str, edits: &[(usize, usize, String)]) -> String {
    let mut edits: Vec<&(usize, usize, String)> = edits.iter().collect();
    edits.sort_by_key(|e| e.0);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (s, e, new) in edits {
        out.push_str(&text[at..*s]);
        out.push_str(new);
        at = *e;
    }
    out.push_str(&text[at..]);
    out
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The file bytes of `w` when every character is written, one after the other, in one file.
fn literal_span(w: &[Ch]) -> Option<(usize, usize)> {
    let first = w.first()?.at?;
    let mut next = first.offset;
    for c in w {
        let a = c.at?;
        if a.file != first.file || a.offset != next {
            return None;
        }
        next += c.c.len_utf8();
    }
    Some((first.offset, next))
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    file: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_line(&mut self) {
        match self.text[self.pos..].find('\n') {
            Some(i) => self.pos += i + 1,
            None => self.pos = self.text.len(),
        }
    }

    /// The next assignment: its name, where it starts, its value, and whether a command
    /// substitution was left out of it. Lines that are not assignments are passed over.
    fn next_assignment(
        &mut self,
        vars: &HashMap<String, Vec<Ch>>,
        var_names: &mut Vec<String>,
    ) -> Option<(String, usize, Vec<Ch>, bool)> {
        loop {
            if self.pos >= self.text.len() {
                return None;
            }
            while matches!(self.peek(), Some(' ' | '\t')) {
                self.pos += 1;
            }
            let rest = &self.text[self.pos..];
            let rest_after_export = rest
                .strip_prefix("export")
                .filter(|r| r.starts_with([' ', '\t']))
                .map(|r| r.trim_start_matches([' ', '\t']));
            if let Some(r) = rest_after_export {
                self.pos = self.text.len() - r.len();
            }
            let start = self.pos;
            let name_len = self.text[self.pos..]
                .char_indices()
                .find(|(i, c)| {
                    !(c.is_ascii_alphanumeric() || *c == '_') || (*i == 0 && c.is_ascii_digit())
                })
                .map_or(self.text.len() - self.pos, |(i, _)| i);
            if name_len == 0 || !self.text[self.pos + name_len..].starts_with('=') {
                self.skip_line();
                continue;
            }
            let name = self.text[self.pos..self.pos + name_len].to_string();
            let var = match var_names.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    var_names.push(name.clone());
                    var_names.len() - 1
                }
            };
            self.pos += name_len + 1;
            let (value, substituted) = self.value(vars, var);
            self.skip_line();
            return Some((name, start, value, substituted));
        }
    }

    /// One shell word: the value of an assignment.
    fn value(&mut self, vars: &HashMap<String, Vec<Ch>>, var: usize) -> (Vec<Ch>, bool) {
        let mut out = Vec::new();
        let mut substituted = false;
        let file = self.file;
        let here = |offset: usize, c: char| Ch {
            c,
            at: Some(At { file, offset, var }),
        };
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | ';' => break,
                '\'' => {
                    self.pos += 1;
                    while let Some(c) = self.peek() {
                        let at = self.pos;
                        self.bump();
                        if c == '\'' {
                            break;
                        }
                        out.push(here(at, c));
                    }
                }
                '"' => {
                    self.pos += 1;
                    while let Some(c) = self.peek() {
                        let at = self.pos;
                        match c {
                            '"' => {
                                self.bump();
                                break;
                            }
                            '\\' => {
                                self.bump();
                                match self.peek() {
                                    Some('\n') => {
                                        self.bump();
                                    }
                                    Some(n @ ('$' | '`' | '"' | '\\')) => {
                                        let at = self.pos;
                                        self.bump();
                                        out.push(here(at, n));
                                    }
                                    _ => out.push(here(at, '\\')),
                                }
                            }
                            '$' => substituted |= self.expand(vars, &mut out),
                            '`' => {
                                self.skip_backquotes();
                                substituted = true;
                            }
                            _ => {
                                self.bump();
                                out.push(here(at, c));
                            }
                        }
                    }
                }
                '\\' => {
                    self.bump();
                    let at = self.pos;
                    match self.bump() {
                        Some('\n') | None => {}
                        Some(n) => out.push(here(at, n)),
                    }
                }
                '$' => {
                    // Unquoted, the expansion is split into words as the shell would; the
                    // kernel line is split at white space anyway.
                    substituted |= self.expand(vars, &mut out);
                }
                '`' => {
                    self.skip_backquotes();
                    substituted = true;
                }
                _ => {
                    let at = self.pos;
                    self.bump();
                    out.push(here(at, c));
                }
            }
        }
        (out, substituted)
    }

    /// `$NAME`, `${NAME}` (the value so far), or `$(...)` (skipped: true).
    fn expand(&mut self, vars: &HashMap<String, Vec<Ch>>, out: &mut Vec<Ch>) -> bool {
        let dollar = self.pos;
        self.bump();
        let rest = &self.text[self.pos..];
        let name = if rest.starts_with('(') {
            let mut depth = 0usize;
            while let Some(c) = self.bump() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            return true;
        } else if let Some(r) = rest.strip_prefix('{') {
            let Some(end) = r.find('}') else {
                self.pos = self.text.len();
                return true;
            };
            self.pos += end + 2;
            r[..end].to_string()
        } else {
            let len = rest
                .char_indices()
                .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
                .map_or(rest.len(), |(i, _)| i);
            if len == 0 {
                // A lone `$` is itself.
                out.push(Ch {
                    c: '$',
                    at: Some(At {
                        file: self.file,
                        offset: dollar,
                        var: usize::MAX,
                    }),
                });
                return false;
            }
            self.pos += len;
            rest[..len].to_string()
        };
        if let Some(v) = vars.get(&name) {
            out.extend(v.iter().copied());
        }
        false
    }

    fn skip_backquotes(&mut self) {
        self.bump();
        while let Some(c) = self.bump() {
            if c == '`' {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(path: &str, text: &str) -> Source {
        Source {
            path: path.into(),
            text: text.into(),
        }
    }

    fn words(m: &Model) -> Vec<&str> {
        m.words.iter().map(|w| w.text.as_str()).collect()
    }

    /// GRUB_CMDLINE_LINUX comes first whatever the order of the assignments, a drop-in's
    /// `$GRUB_CMDLINE_LINUX_DEFAULT` keeps the earlier words with their own file and line.
    #[test]
    fn the_kernel_line_is_linux_then_default_with_each_words_file_and_line() {
        let m = model(&[
            src(
                DEFAULT_GRUB,
                "# GRUB\nGRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet isolcpus=1\"\nexport GRUB_CMDLINE_LINUX='console=ttyS0'\n",
            ),
            src(
                "/etc/default/grub.d/isold.cfg",
                "# x\nGRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT isolcpus=2-3\"\n",
            ),
        ]);
        assert_eq!(
            words(&m),
            ["console=ttyS0", "quiet", "isolcpus=1", "isolcpus=2-3"]
        );
        let w = &m.words[2];
        assert_eq!(
            (w.file.as_str(), w.line, w.var.as_str()),
            (DEFAULT_GRUB, 3, CMDLINE_LINUX_DEFAULT)
        );
        assert_eq!(
            w.whence(),
            "/etc/default/grub:3 (GRUB_CMDLINE_LINUX_DEFAULT)"
        );
        let (s, e) = w.span.unwrap();
        assert_eq!(
            &"# GRUB\nGRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet isolcpus=1\"\n"[s..e],
            "isolcpus=1"
        );
        assert_eq!(m.words[3].file, "/etc/default/grub.d/isold.cfg");
        assert_eq!(m.words[3].line, 2);
        assert_eq!(m.words[0].var, CMDLINE_LINUX);
        assert_eq!(
            m.default_assignments,
            [
                (DEFAULT_GRUB.to_string(), 3),
                ("/etc/default/grub.d/isold.cfg".to_string(), 2)
            ]
        );
    }

    /// A later assignment without `$GRUB_CMDLINE_LINUX_DEFAULT` drops what came before;
    /// braces, escapes and a command substitution are read as the shell reads them.
    #[test]
    fn later_assignments_replace_and_quotes_are_read_as_the_shell_does() {
        let m = model(&[
            src(DEFAULT_GRUB, "GRUB_CMDLINE_LINUX_DEFAULT=\"a b\"\nGRUB_CMDLINE_LINUX=x\\ y\n"),
            src(
                "/etc/default/grub.d/50-z.cfg",
                "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} c\\\"d\" # comment\nif true; then\n  GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT $(uname -r)\"\nfi\n",
            ),
            src("/etc/default/grub.d/60-y.cfg", "GRUB_CMDLINE_LINUX_DEFAULT='new'\n"),
        ]);
        assert_eq!(words(&m), ["x", "y", "new"]);
        assert_eq!(
            m.not_understood,
            [("/etc/default/grub.d/50-z.cfg".to_string(), 3)]
        );
        assert_eq!(m.default_assignments.len(), 4);
        let m = model(&[src(
            DEFAULT_GRUB,
            "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} c\\\"d e\"\n",
        )]);
        assert_eq!(words(&m), ["c\"d", "e"]);
        assert_eq!(
            m.words[0].span, None,
            "an escape inside: not one literal run"
        );
        assert!(m.words[1].span.is_some());
    }

    #[test]
    fn the_sourced_files_are_grub_and_grub_d_cfg_files_only() {
        assert!(is_source_path("/etc/default/grub"));
        assert!(is_source_path("/etc/default/grub.d/50-cloudimg.cfg"));
        assert!(!is_source_path("/etc/default/grub.d/.cfg"));
        assert!(!is_source_path("/etc/default/grub.d/x.conf"));
        assert!(!is_source_path("/etc/default/grub.d/../passwd.cfg"));
        assert!(!is_source_path("/etc/default/grub.d/a/b.cfg"));
        assert!(!is_source_path("/etc/default/irqbalance"));
        let s = with_file(
            &[src("/etc/default/grub.d/z.cfg", ""), src(DEFAULT_GRUB, "")],
            "/etc/default/grub.d/isold.cfg",
            "x",
        );
        let order: Vec<&str> = s.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            order,
            [
                DEFAULT_GRUB,
                "/etc/default/grub.d/isold.cfg",
                "/etc/default/grub.d/z.cfg"
            ]
        );
        assert_eq!(
            replace_spans("ab cd ef", &[(6, 8, "XY".into()), (0, 2, "1".into())]),
            "1 cd XY"
        );
    }

    #[test]
    fn sources_are_read_in_grub_mkconfigs_order() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("etc/default/grub.d");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(dir.path().join("etc/default/grub"), "A=1\n").unwrap();
        std::fs::write(d.join("b.cfg"), "B=1\n").unwrap();
        std::fs::write(d.join("a.cfg"), "C=1\n").unwrap();
        std::fs::write(d.join("a.cfg.bak"), "D=1\n").unwrap();
        let s = sources(&SysRoot::new(dir.path())).unwrap();
        let order: Vec<&str> = s.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            order,
            [
                DEFAULT_GRUB,
                "/etc/default/grub.d/a.cfg",
                "/etc/default/grub.d/b.cfg"
            ]
        );
    }
}
