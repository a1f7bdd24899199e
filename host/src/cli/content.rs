//! How `toolhost call` shows a result's content items to a person at a shell
//! (docs/cli.md, "Results with content"):
//!
//! - text as is, on its own lines, but control characters (escape sequences a plugin could
//!   send a terminal) shown escaped, as `\u{1b}` ([`printable`]);
//! - an image, a sound or a binary embedded resource saved as a file in a new private directory
//!   (mode 0700, under `$TMPDIR`, made only when a result has such an item), shown as
//!   `[image/png saved to PATH]`;
//! - an embedded text resource as a `[resource URI (MIME)]` line, then its text;
//! - a resource link as a `[link URI: NAME]` line.

use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use toolhost::{ContentItem, ResourceBody};

/// Where binary items go: a directory made on first use.
#[derive(Default)]
pub(crate) struct Saved {
    dir: Option<PathBuf>,
    count: usize,
}

impl Saved {
    /// Write `data` to a new file named after its MIME type; its path.
    fn save(&mut self, mime_type: Option<&str>, data: &[u8]) -> Result<PathBuf> {
        let dir = match &self.dir {
            Some(dir) => dir.clone(),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("toolhost-call-")
                    .permissions(std::fs::Permissions::from_mode(0o700))
                    .tempdir()
                    .context("making a directory for the result's files")?
                    .keep();
                self.dir = Some(dir.clone());
                dir
            }
        };
        self.count += 1;
        let path = dir.join(format!("{}.{}", self.count, extension(mime_type)));
        std::fs::write(&path, data).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// The text to print for `items`, saving binary ones with `saved`.
pub(crate) fn render(items: &[ContentItem], saved: &mut Saved) -> Result<String> {
    let mut text = String::new();
    for item in items {
        match item {
            ContentItem::Text(body) => push_line(&mut text, &printable(body)),
            ContentItem::Image { mime_type, data } | ContentItem::Audio { mime_type, data } => {
                let path = saved.save(Some(mime_type), data)?;
                push_line(&mut text, &printable(&saved_line(mime_type, &path)));
            }
            ContentItem::ResourceLink { uri, name, .. } => {
                push_line(&mut text, &printable(&format!("[link {uri}: {name}]")));
            }
            ContentItem::Resource {
                uri,
                mime_type,
                body,
            } => match body {
                ResourceBody::Text(body) => {
                    let kind = mime_type.as_deref().unwrap_or("text");
                    push_line(&mut text, &printable(&format!("[resource {uri} ({kind})]")));
                    push_line(&mut text, &printable(body));
                }
                ResourceBody::Blob(data) => {
                    let path = saved.save(mime_type.as_deref(), data)?;
                    let kind = mime_type.as_deref().unwrap_or("application/octet-stream");
                    push_line(
                        &mut text,
                        &printable(&format!(
                            "[resource {uri} ({kind}) saved to {}]",
                            path.display()
                        )),
                    );
                }
            },
        }
    }
    Ok(text)
}

/// `text` with every control character but a line feed and a tab shown escaped (`\u{1b}`), so
/// that what a plugin or a command wrote cannot drive the terminal it is printed on.
pub(crate) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

fn saved_line(mime_type: &str, path: &Path) -> String {
    format!("[{mime_type} saved to {}]", path.display())
}

/// `line` and a newline, after a newline if `text` does not end with one.
fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let _ = write!(text, "{line}");
    if !line.ends_with('\n') {
        text.push('\n');
    }
}

/// A file name extension for a MIME type (`bin` for one not known here).
fn extension(mime_type: Option<&str>) -> &'static str {
    let essence = mime_type
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "application/json" => "json",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        _ => "bin",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_prints_as_is_and_bytes_are_saved_as_files() {
        let items = vec![
            ContentItem::Text("first".into()),
            ContentItem::Image {
                mime_type: "image/png".into(),
                data: vec![1, 2, 3],
            },
            ContentItem::Resource {
                uri: "test://r".into(),
                mime_type: Some("application/json".into()),
                body: ResourceBody::Text("{}".into()),
            },
        ];
        let mut saved = Saved::default();
        let text = render(&items, &mut saved).unwrap();
        let dir = saved.dir.clone().expect("a directory for the image");
        let image = dir.join("1.png");
        assert_eq!(std::fs::read(&image).unwrap(), [1, 2, 3]);
        assert_eq!(
            text,
            format!(
                "first\n[image/png saved to {}]\n[resource test://r (application/json)]\n{{}}\n",
                image.display()
            )
        );
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "the directory is private");
        std::fs::remove_dir_all(dir).unwrap();

        let mut none = Saved::default();
        render(&[ContentItem::Text("t".into())], &mut none).unwrap();
        assert!(none.dir.is_none(), "no directory without bytes to save");
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(printable("a\u{1b}[2Jb\tc\nd\r"), "a\\u{1b}[2Jb\tc\nd\\u{d}");
    }
}
