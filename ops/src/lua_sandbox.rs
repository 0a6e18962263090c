//! What keeps a health check inside Argo CD's Lua: its sandbox opens only
//! the base library, `string`, `table` and `math`, and it runs gopher-lua
//! (Lua 5.1). [`sandbox_violations`] finds, line by line, the globals of
//! other libraries, the loaders, and Lua 5.2+ syntax a script uses, with
//! its comments and string literals blanked out first (so a message that
//! says "os." is not a finding).

/// The globals of Lua's standard libraries that Argo CD's sandbox does not
/// offer (it opens only base, `string`, `table` and `math`), and the base
/// functions that load code, plus `goto` (Lua 5.2+).
const FORBIDDEN_NAMES: [&str; 13] = [
    "os",
    "io",
    "debug",
    "coroutine",
    "package",
    "utf8",
    "require",
    "load",
    "loadstring",
    "loadfile",
    "dofile",
    "collectgarbage",
    "goto",
];

/// What in `script` Argo CD's Lua would not run: a library or loader the
/// sandbox does not offer, or Lua 5.2+ syntax (gopher-lua is Lua 5.1:
/// `goto`, integer division `//`, bitwise operators, `<const>`/`<close>`).
/// Comments and string literals are ignored; a name after `.` or `:` is a
/// field (`obj.status.load`), not a global. One entry per finding, with its
/// line.
pub fn sandbox_violations(script: &str) -> Vec<String> {
    let code = blank_comments_and_strings(script);
    let mut found = Vec::new();
    for (index, line) in code.lines().enumerate() {
        let number = index + 1;
        let bytes = line.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            let byte = bytes[at];
            if byte.is_ascii_alphabetic() || byte == b'_' {
                let start = at;
                while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
                    at += 1;
                }
                let name = &line[start..at];
                // `a.b` and `a:b` name a field; `a .. b` and `::b::` do not.
                let before = line[..start].trim_end();
                let field = (before.ends_with('.') && !before.ends_with(".."))
                    || (before.ends_with(':') && !before.ends_with("::"));
                if !field && FORBIDDEN_NAMES.contains(&name) {
                    found.push(format!(
                        "line {number}: `{name}` is not in Argo CD's Lua sandbox"
                    ));
                }
                continue;
            }
            let next = bytes.get(at + 1).copied();
            let operator = match (byte, next) {
                (b'/', Some(b'/')) => Some("`//` (integer division, Lua 5.3+)"),
                (b'&' | b'|', _) => Some("a bitwise operator (Lua 5.3+)"),
                (b'~', next) if next != Some(b'=') => Some("a bitwise operator (Lua 5.3+)"),
                (b'<', Some(b'<')) | (b'>', Some(b'>')) => Some("a shift (Lua 5.3+)"),
                (b':', Some(b':')) => Some("a `::label::` (Lua 5.2+)"),
                _ => None,
            };
            if let Some(what) = operator {
                found.push(format!(
                    "line {number}: {what} is not Lua 5.1, which Argo CD runs"
                ));
                at += 2;
                continue;
            }
            at += 1;
        }
        for attribute in ["<const>", "<close>"] {
            if line.replace(' ', "").contains(attribute) {
                found.push(format!(
                    "line {number}: the attribute {attribute} is not Lua 5.1, which Argo CD runs"
                ));
            }
        }
    }
    found
}

/// `script` with its comments and string literals replaced by spaces
/// (newlines kept, so line numbers stay), for [`sandbox_violations`].
fn blank_comments_and_strings(script: &str) -> String {
    let bytes = script.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    let blank = |out: &mut Vec<u8>, part: &[u8]| {
        out.extend(part.iter().map(|&b| if b == b'\n' { b'\n' } else { b' ' }));
    };
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.starts_with(b"--") {
            let end = long_bracket_end(&rest[2..])
                .map(|end| 2 + end)
                .or_else(|| rest.iter().position(|&b| b == b'\n'))
                .unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            at += end;
        } else if let Some(end) = long_bracket_end(rest) {
            blank(&mut out, &rest[..end]);
            at += end;
        } else if rest[0] == b'"' || rest[0] == b'\'' {
            let quote = rest[0];
            let mut end = 1;
            while end < rest.len() && rest[end] != quote && rest[end] != b'\n' {
                end += if rest[end] == b'\\' { 2 } else { 1 };
            }
            let end = (end + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            at += end;
        } else {
            out.push(rest[0]);
            at += 1;
        }
    }
    // Strings and comments became ASCII spaces byte for byte and the rest
    // is the script's own bytes, so this is valid UTF-8 and loses nothing.
    String::from_utf8_lossy(&out).into_owned()
}

/// When `text` opens a long bracket (`[[`, `[==[`), the length up to and
/// including its matching close (the whole text when unclosed).
fn long_bracket_end(text: &[u8]) -> Option<usize> {
    if text.first() != Some(&b'[') {
        return None;
    }
    let level = text[1..].iter().take_while(|&&b| b == b'=').count();
    if text.get(1 + level) != Some(&b'[') {
        return None;
    }
    let mut close = Vec::with_capacity(level + 2);
    close.push(b']');
    close.extend(std::iter::repeat_n(b'=', level));
    close.push(b']');
    let body = 2 + level;
    Some(
        text[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map_or(text.len(), |at| body + at + close.len()),
    )
}
