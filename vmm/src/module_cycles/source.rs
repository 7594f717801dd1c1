//! The little of Rust's lexical structure the cycle check needs: code without its comments and
//! literals, as identifiers, `::` and punctuation with their line numbers; `#[cfg(test)]` items
//! taken out; and the paths a `use` tree names.

/// Whether an `r` at `b[i]` starts a raw string (`r"`, `r#"`, `br"`), not an identifier's end.
fn raw_prefix(b: &[u8], i: usize) -> bool {
    let word = |j: usize| b[j].is_ascii_alphanumeric() || b[j] == b'_';
    match i {
        0 => true,
        1 => !word(0) || b[0] == b'b',
        _ => !word(i - 1) || (b[i - 1] == b'b' && !word(i - 2)),
    }
}

/// The code with comments, string and char literals blanked (newlines kept for line numbers).
pub(super) fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#")) && raw_prefix(b, i) {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let open = 2 + hashes;
            out.extend(std::iter::repeat_n(b' ', open));
            i += open;
            while i < b.len() && !b[i..].starts_with(&close) {
                blank(&mut out, b[i]);
                i += 1;
            }
            out.extend(std::iter::repeat_n(b' ', close.len()));
            i += close.len();
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    out.push(b' ');
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), or a lifetime ('a), which stays.
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter().skip(3).position(|&c| c == b'\'').map(|p| p + 4)
            } else if rest.get(2) == Some(&b'\'') {
                Some(3)
            } else {
                None
            };
            match end {
                Some(n) => {
                    out.extend(std::iter::repeat_n(b' ', n));
                    i += n;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    Ident(String),
    Path,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Hash,
    LBracket,
    RBracket,
    Other,
}

pub(super) fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(code[start..i].to_string()), line));
        } else if b[i..].starts_with(b"::") {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((
                match c {
                    b'{' => Tok::Open,
                    b'}' => Tok::Close,
                    b',' => Tok::Comma,
                    b';' => Tok::Semi,
                    b'*' => Tok::Star,
                    b'#' => Tok::Hash,
                    b'[' => Tok::LBracket,
                    b']' => Tok::RBracket,
                    _ => Tok::Other,
                },
                line,
            ));
            i += 1;
        }
    }
    out
}

/// Removes every `#[cfg(test)]` item (an attribute, then up to its `;` or its block); returns
/// the names of `#[cfg(test)] mod x;` children, whose files are test code too.
pub(super) fn drop_test_items(toks: Vec<(Tok, usize)>) -> (Vec<(Tok, usize)>, Vec<String>) {
    let ident = |t: &Tok, s: &str| matches!(t, Tok::Ident(x) if x == s);
    let mut out = Vec::with_capacity(toks.len());
    let mut test_mods = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let is_cfg_test = toks[i].0 == Tok::Hash
            && toks.len() > i + 6
            && ident(&toks[i + 2].0, "cfg")
            && ident(&toks[i + 4].0, "test");
        if !is_cfg_test {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        // Skip `#[cfg(test)]` and any further attributes.
        while toks.get(i).is_some_and(|t| t.0 == Tok::Hash) {
            let mut depth = 0;
            i += 1;
            while i < toks.len() {
                match toks[i].0 {
                    Tok::LBracket => depth += 1,
                    Tok::RBracket => depth -= 1,
                    _ => {}
                }
                i += 1;
                if depth == 0 {
                    break;
                }
            }
        }
        let is_use = toks.get(i).is_some_and(|t| ident(&t.0, "use"))
            || (toks.get(i).is_some_and(|t| ident(&t.0, "pub"))
                && toks[i..].iter().take(6).any(|t| ident(&t.0, "use")));
        if let Some(m) = toks[i..].iter().position(|t| ident(&t.0, "mod")) {
            if let (Some((Tok::Ident(name), _)), Some((Tok::Semi, _))) =
                (toks.get(i + m + 1), toks.get(i + m + 2))
            {
                if toks[i..i + m]
                    .iter()
                    .all(|t| !matches!(t.0, Tok::Semi | Tok::Open))
                {
                    test_mods.push(name.clone());
                }
            }
        }
        let mut depth = 0;
        while i < toks.len() {
            match toks[i].0 {
                Tok::Open => depth += 1,
                Tok::Close => {
                    depth -= 1;
                    if depth == 0 && !is_use {
                        i += 1;
                        break;
                    }
                }
                Tok::Semi if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    (out, test_mods)
}

/// The paths of a `use` tree starting at `toks[*i]`, up to its `;`.
pub(super) fn use_paths(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: &[String],
    out: &mut Vec<Vec<String>>,
) {
    let mut path = prefix.to_vec();
    while *i < toks.len() {
        match &toks[*i].0 {
            Tok::Ident(s) if s == "as" => {
                *i += 2;
                continue;
            }
            Tok::Ident(s) => path.push(s.clone()),
            Tok::Path | Tok::Star => {}
            Tok::Open => {
                *i += 1;
                loop {
                    use_paths(toks, i, &path, out);
                    match toks.get(*i).map(|t| &t.0) {
                        Some(Tok::Comma) => *i += 1,
                        _ => break,
                    }
                    if toks.get(*i).map(|t| &t.0) == Some(&Tok::Close) {
                        break;
                    }
                }
                *i += 1; // the `}`
                path.clear();
                continue;
            }
            Tok::Comma | Tok::Close | Tok::Semi => break,
            _ => {}
        }
        *i += 1;
    }
    if !path.is_empty() {
        out.push(path);
    }
}
