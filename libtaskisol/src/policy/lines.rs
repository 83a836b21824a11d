//! isold's own lines in a file it shares with its administrator.
//!
//! The files isold edits (irqbalance's defaults, its systemd and modprobe.d drop-ins, GRUB's
//! sources) are the administrator's too: they add options, comments, their own lines. A
//! [`FileEdit`] says which lines are isold's and what they hold, and is applied to the file
//! *as it is now*: each of isold's lines takes the place of the line its [`Key`] finds, or is
//! inserted; every other line stays byte for byte. So a file holds what isold wants exactly
//! when applying the edit changes nothing ([`FileEdit::holds`]): a line the administrator
//! added is never drift, and a repair never writes back a line isold did not write.

/// How one of isold's lines is found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// The first line that begins with this text once its leading blanks are cut (a shell
    /// assignment `NAME=`, a systemd setting `Name=`; a commented one is not found).
    Prefix(String),
    /// A modprobe.d line `options MODULE ...` that sets exactly these parameters, whatever
    /// their values (an administrator's own `options` line for the module, with other
    /// parameters, is theirs).
    Options {
        /// The module.
        module: String,
        /// Its parameters isold sets.
        params: Vec<String>,
    },
}

impl Key {
    fn finds(&self, line: &str) -> bool {
        match self {
            Key::Prefix(p) => line.trim_start().starts_with(p.as_str()),
            Key::Options { module, params } => {
                let mut w = line.split_whitespace();
                if w.next() != Some("options") || w.next() != Some(module.as_str()) {
                    return false;
                }
                let mut names: Vec<&str> = w.map(|o| o.split('=').next().unwrap_or(o)).collect();
                let mut want: Vec<&str> = params.iter().map(String::as_str).collect();
                names.sort_unstable();
                want.sort_unstable();
                names == want
            }
        }
    }
}

/// One of isold's lines: how it is found, and its text (without a line end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// How it is found.
    pub key: Key,
    /// What it holds.
    pub text: String,
}

impl Line {
    /// A line found by the start of its text, up to and including `prefix`.
    pub fn by_prefix(prefix: &str, text: String) -> Line {
        Line {
            key: Key::Prefix(prefix.to_string()),
            text,
        }
    }
}

/// What isold writes in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileEdit {
    /// The whole text, made from the file right before its write (GRUB's sources, which
    /// `isold bootargs --write-grub` edits word by word).
    Whole(String),
    /// isold's lines, in order: each replaces the first line its key finds, or is inserted
    /// right after the previous one of isold's (the first: at the file's start, or its end
    /// when `append`); every other line of the file is kept.
    Lines {
        /// isold's lines.
        lines: Vec<Line>,
        /// Where a first line that is not found goes: the end (true) or the start.
        append: bool,
    },
}

impl FileEdit {
    /// The file isold wants, made from `current` (`None`: there is none).
    pub fn apply(&self, current: Option<&str>) -> String {
        let (lines, append) = match self {
            FileEdit::Whole(text) => return text.clone(),
            FileEdit::Lines { lines, append } => (lines, *append),
        };
        let mut segs: Vec<String> = current
            .unwrap_or_default()
            .split_inclusive('\n')
            .map(str::to_string)
            .collect();
        let mut after: Option<usize> = None;
        for l in lines {
            let found = segs
                .iter()
                .position(|s| l.key.finds(s.trim_end_matches('\n')));
            let at = match found {
                Some(i) => {
                    segs[i] = format!("{}\n", l.text);
                    i
                }
                None => {
                    let at = after.unwrap_or(if append { segs.len() } else { 0 });
                    // A last line without its line end gets one before a line follows it.
                    if at > 0 && !segs[at - 1].ends_with('\n') {
                        segs[at - 1].push('\n');
                    }
                    segs.insert(at, format!("{}\n", l.text));
                    at
                }
            };
            after = Some(at + 1);
        }
        segs.concat()
    }

    /// Whether `current` holds isold's lines as they must be (a file that does not exist does
    /// not).
    pub fn holds(&self, current: Option<&str>) -> bool {
        current.is_some_and(|c| self.apply(Some(c)) == c)
    }

    /// `current` with isold's lines as they are in `written` (what isold wrote last, maybe
    /// with other values): each line a key finds holds `written`'s text again. What tells
    /// isold's earlier change apart from its administrator's edits, when one of isold's lines
    /// was changed by hand since. A whole text is its own: `current` is returned as it is.
    pub fn as_written(&self, written: &str, current: &str) -> String {
        let FileEdit::Lines { lines, append } = self else {
            return current.to_string();
        };
        let before: Vec<Line> = lines
            .iter()
            .filter_map(|l| {
                let text = written.lines().find(|w| l.key.finds(w))?;
                Some(Line {
                    key: l.key.clone(),
                    text: text.to_string(),
                })
            })
            .collect();
        FileEdit::Lines {
            lines: before,
            append: *append,
        }
        .apply(Some(current))
    }

    /// isold's lines alone: the file it would make where there is none.
    pub fn own(&self) -> String {
        self.apply(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drop_in() -> FileEdit {
        FileEdit::Lines {
            lines: vec![
                Line::by_prefix("# Written by isold", "# Written by isold: x".into()),
                Line::by_prefix("[Manager]", "[Manager]".into()),
                Line::by_prefix("CPUAffinity=", "CPUAffinity=0-1".into()),
            ],
            append: false,
        }
    }

    #[test]
    fn a_new_file_is_isolds_lines() {
        assert_eq!(
            drop_in().own(),
            "# Written by isold: x\n[Manager]\nCPUAffinity=0-1\n"
        );
        assert!(!drop_in().holds(None));
        assert!(drop_in().holds(Some(&drop_in().own())));
    }

    /// An administrator's lines, before, between and after isold's, are no drift and stay as
    /// they are when isold's own line is put back.
    #[test]
    fn the_administrators_lines_stay_and_are_no_drift() {
        let admin = "# Written by isold: x\n[Manager]\nDefaultTimeoutStartSec=10s\nCPUAffinity=0-1\nDefaultLimitNOFILE=4096\n";
        assert!(drop_in().holds(Some(admin)));
        let changed = admin.replace("CPUAffinity=0-1", "CPUAffinity=0-3");
        assert!(!drop_in().holds(Some(&changed)));
        assert_eq!(drop_in().apply(Some(&changed)), admin);
        // isold's line removed: back after the previous of isold's lines.
        let removed = admin.replace("CPUAffinity=0-1\n", "");
        assert_eq!(
            drop_in().apply(Some(&removed)),
            "# Written by isold: x\n[Manager]\nCPUAffinity=0-1\nDefaultTimeoutStartSec=10s\nDefaultLimitNOFILE=4096\n"
        );
    }

    /// What isold wrote last, read back into the file as it is now: isold's line an
    /// administrator changed by hand holds what isold wrote again, every other line stays, and
    /// a whole text is left as it is.
    #[test]
    fn as_written_puts_isolds_last_text_back_into_the_file_as_it_is() {
        let written = "# Written by isold: x\n[Manager]\nCPUAffinity=0-1\n";
        let now = "# Written by isold: x\n[Manager]\nDefaultTimeoutStartSec=10s\nCPUAffinity=0,1\n";
        assert_eq!(
            drop_in().as_written(written, now),
            "# Written by isold: x\n[Manager]\nDefaultTimeoutStartSec=10s\nCPUAffinity=0-1\n"
        );
        // The new policy's line is not what counts: what isold wrote last is.
        let wrote_before = written.replace("0-1", "0-2");
        assert_eq!(
            drop_in().as_written(&wrote_before, now),
            "# Written by isold: x\n[Manager]\nDefaultTimeoutStartSec=10s\nCPUAffinity=0-2\n"
        );
        assert_eq!(FileEdit::Whole("a\n".into()).as_written("b\n", now), now);
    }

    #[test]
    fn options_lines_are_found_by_their_parameters() {
        let kvm = FileEdit::Lines {
            lines: vec![
                Line::by_prefix("# Written by isold", "# Written by isold".into()),
                Line {
                    key: Key::Options {
                        module: "kvm".into(),
                        params: vec!["nx_huge_pages".into(), "kvmclock_periodic_sync".into()],
                    },
                    text: "options kvm kvmclock_periodic_sync=0 nx_huge_pages=0".into(),
                },
            ],
            append: false,
        };
        let admin = "# Written by isold\noptions kvm ignore_msrs=1\noptions kvm kvmclock_periodic_sync=0 nx_huge_pages=0\n";
        assert!(kvm.holds(Some(admin)));
        let changed = admin.replace("nx_huge_pages=0", "nx_huge_pages=1");
        assert_eq!(kvm.apply(Some(&changed)), admin);
    }

    #[test]
    fn an_appended_line_follows_an_unterminated_last_line() {
        let e = FileEdit::Lines {
            lines: vec![Line::by_prefix("B=", "B=2".into())],
            append: true,
        };
        assert_eq!(e.apply(Some("A=1")), "A=1\nB=2\n");
        assert_eq!(e.apply(Some("#B=\nB=7\nC=3")), "#B=\nB=2\nC=3");
        assert_eq!(FileEdit::Whole("w".into()).apply(Some("x")), "w");
    }
}
