//! The layout of isold's human output: lines wrapped at 79 columns, table cells wrapped in
//! their column. Nothing here knows what it lays out.

/// A table cell of at most `width` columns: its first line, and the lines that continue it
/// (under it, in the same column), broken after a space, `-` or `/` where there is one. A
/// name is wrapped, never cut.
pub(crate) fn cell(text: &str, width: usize) -> (String, Vec<String>) {
    let mut lines: Vec<String> = Vec::new();
    let mut rest: Vec<char> = text.chars().collect();
    while rest.len() > width {
        let at = rest[..width]
            .iter()
            .rposition(|c| matches!(c, ' ' | '-' | '/'))
            // A break that leaves the line more than half empty cuts the name instead.
            .filter(|&i| i + 1 >= width / 2)
            .map_or(width, |i| i + 1);
        lines.push(rest[..at].iter().collect::<String>().trim_end().to_string());
        rest = rest[at..].to_vec();
    }
    lines.push(rest.into_iter().collect());
    let first = lines.remove(0);
    (first, lines)
}

/// Wrap `text` at 79 columns, every line after the first indented by `indent` spaces.
pub(crate) fn wrap(text: &str, first: usize, indent: usize) -> String {
    let mut out = String::new();
    let mut col = first;
    for word in text.split(' ') {
        if col > indent && col + 1 + word.len() > 79 {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            col = indent;
        } else if !out.is_empty() {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += word.len();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_cell_is_wrapped_in_its_column_never_cut() {
        let (first, rest) = cell(
            "kthread 72 kworker/3:1-events_power_efficient (12 ms CPU)",
            44,
        );
        assert_eq!(first, "kthread 72 kworker/3:1-");
        assert_eq!(rest, ["events_power_efficient (12 ms CPU)"]);
        assert!(first.chars().count() <= 44);
        // A break just at half the width is taken; one before it is not (the name is cut).
        let at_half = format!("{} {}", "a".repeat(21), "b".repeat(40));
        assert_eq!(cell(&at_half, 44).0, "a".repeat(21));
        let before = format!("{} {}", "a".repeat(20), "b".repeat(40));
        assert_eq!(cell(&before, 44).0.chars().count(), 44);
        let (first, rest) = cell("short", 44);
        assert_eq!((first.as_str(), rest.len()), ("short", 0));
        // No place to break, and not ASCII: hard breaks at a character, nothing lost.
        let long = "é".repeat(50);
        let (first, rest) = cell(&long, 44);
        assert_eq!(first.chars().count(), 44);
        assert_eq!(format!("{first}{}", rest.concat()), long);
    }

    #[test]
    fn wrapping_keeps_every_line_within_79_columns() {
        assert_eq!(wrap("short text", 10, 4), "short text");
        let long = "word ".repeat(40);
        let w = wrap(long.trim_end(), 6, 4);
        let lines: Vec<&str> = w.lines().collect();
        assert!(lines.len() > 2, "{w}");
        assert!(6 + lines[0].len() <= 79, "{w}");
        assert!(
            lines[1..]
                .iter()
                .all(|l| l.len() <= 79 && l.starts_with("    word")),
            "{w}"
        );
        assert_eq!(w.split_whitespace().count(), 40, "no word lost");
        // A word longer than a line stays whole on its own line.
        let w = wrap(&format!("a {}", "x".repeat(90)), 10, 2);
        assert_eq!(w, format!("a\n  {}", "x".repeat(90)));
        // Exactly 79 columns fit; 80 do not.
        let (a, b) = ("a".repeat(39), "b".repeat(39));
        assert_eq!(wrap(&format!("{a} {b}"), 0, 2), format!("{a} {b}"));
        assert_eq!(wrap(&format!("{a} {b}b"), 0, 2), format!("{a}\n  {b}b"));
        // After a wrap, words on the new line are still apart, also when the first line
        // started further right than the indent.
        let (c, d) = ("c".repeat(35), "d".repeat(10));
        assert_eq!(wrap(&format!("{c} {d} y"), 40, 2), format!("{c}\n  {d} y"));
        // Never an empty line: at the indent, a long word stays where it is.
        assert_eq!(wrap(&"y".repeat(90), 2, 2), "y".repeat(90));
    }
}
