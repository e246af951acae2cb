//! A small XML well-formedness check for the SVG the crate writes (no XML parser among the
//! dependencies). A target includes it with `#[path = "support/xml.rs"] mod xml;`.
#![allow(dead_code)]

/// Whether `s` is well-formed XML as far as SVG output goes: every character allowed by XML 1.0, every `&` an entity,
/// tags balanced and properly nested, one root.
pub fn well_formed(s: &str) -> Result<(), String> {
    if let Some(c) = s.chars().find(|&c| {
        let u = c as u32;
        (u < 0x20 && !matches!(c, '\t' | '\n' | '\r')) || u == 0xFFFE || u == 0xFFFF
    }) {
        return Err(format!("character U+{:04X} is not allowed", c as u32));
    }
    let mut stack: Vec<String> = Vec::new();
    let mut i = 0;
    let b = s.as_bytes();
    let mut roots = 0;
    while i < b.len() {
        match b[i] {
            b'&' => {
                let end = s[i..].find(';').ok_or("an `&` without `;`")?;
                let ent = &s[i + 1..i + end];
                let ok = matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos")
                    || ent.strip_prefix('#').is_some_and(|n| {
                        n.strip_prefix('x').map_or_else(
                            || n.parse::<u32>().is_ok(),
                            |h| u32::from_str_radix(h, 16).is_ok(),
                        )
                    });
                if !ok {
                    return Err(format!("unknown entity `&{ent};`"));
                }
                i += end + 1;
            }
            b'<' => {
                let end = i + s[i..].find('>').ok_or("a `<` without `>`")?;
                let tag = &s[i + 1..end];
                if tag.starts_with('?') || tag.starts_with('!') {
                } else if let Some(name) = tag.strip_prefix('/') {
                    let open = stack.pop().ok_or("a closing tag without an opening one")?;
                    if open != name.trim() {
                        return Err(format!("</{name}> closes <{open}>"));
                    }
                } else {
                    if tag.contains('<') {
                        return Err(format!("`<` inside a tag: {tag}"));
                    }
                    let name: String = tag
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '/')
                        .collect();
                    if stack.is_empty() {
                        roots += 1;
                    }
                    if !tag.ends_with('/') {
                        stack.push(name);
                    }
                }
                i = end + 1;
            }
            b'>' => return Err("a bare `>`".into()),
            _ => i += 1,
        }
    }
    if !stack.is_empty() || roots != 1 {
        return Err(format!("unclosed {stack:?} or {roots} roots"));
    }
    Ok(())
}
