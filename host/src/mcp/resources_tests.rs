//! Tests of output resources: URI parsing, byte and line pages, and the next-page links.

use super::*;

fn log(content: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.log");
    std::fs::write(&path, content).expect("write");
    (dir, path)
}

fn text_and_meta(contents: ResourceContents) -> (String, serde_json::Value) {
    match contents {
        ResourceContents::TextResourceContents { text, meta, .. } => (
            text,
            serde_json::Value::Object(meta.map(|m| m.0).unwrap_or_default()),
        ),
        other => panic!("expected text: {other:?}"),
    }
}

fn read_uri(path: &PathBuf, uri: &str) -> (String, serde_json::Value) {
    let request = parse(uri).expect("a valid URI");
    text_and_meta(read(uri, &request.id, path, &request.range).expect("read"))
}

#[test]
fn uris_parse_and_bad_ones_say_why() {
    assert_eq!(
        parse("toolhost://process/abc/output").expect("plain"),
        Request {
            id: "abc".into(),
            range: Range::Bytes {
                offset: 0,
                length: None
            }
        }
    );
    assert_eq!(
        parse("toolhost://process/abc/output?line=3&lines=2")
            .expect("lines")
            .range,
        Range::Lines { first: 3, count: 2 }
    );
    for (uri, why) in [
        ("toolhost://process//output", "no process id"),
        ("toolhost://process/a/output?offset=x", "not a whole number"),
        ("toolhost://process/a/output?bogus=1", "unknown parameter"),
        ("toolhost://process/a/output?offset=1&line=2", "not both"),
        ("toolhost://process/a/output?line=0", "from 1"),
    ] {
        let error = parse(uri).expect_err(uri);
        assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{uri}");
        assert!(error.message.contains(why), "{uri}: {}", error.message);
    }
    let foreign = parse("file:///etc/passwd").expect_err("foreign");
    assert_eq!(foreign.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
}

#[test]
fn byte_pages_join_up_to_the_whole_file() {
    let content: Vec<u8> = (0..(PAGE as usize * 2 + 1000))
        .map(|i| {
            if i % 7 == 0 {
                b'\n'
            } else {
                b'a' + (i % 26) as u8
            }
        })
        .collect();
    let (_dir, path) = log(&content);
    let mut uri = uri("p");
    let mut whole = String::new();
    let mut pages = 0;
    loop {
        let (text, meta) = read_uri(&path, &uri);
        whole.push_str(&text);
        pages += 1;
        match meta["toolhost/next"].as_str() {
            Some(next) => uri = next.to_owned(),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(whole.as_bytes(), content);
}

#[test]
fn a_byte_range_is_exact_and_pages_never_split_a_character() {
    let (_dir, path) = log("héllo wörld".as_bytes());
    let (text, meta) = read_uri(&path, "toolhost://process/p/output?offset=7&length=5");
    assert_eq!(text, "wörl");
    assert_eq!(meta["toolhost/range"]["length"], 5);
    assert!(meta.get("toolhost/next").is_none());
    // A cut inside `ö` (bytes 8-9) ends before it; the next page starts with it.
    let (text, meta) = read_uri(&path, "toolhost://process/p/output?offset=7&length=2");
    assert_eq!(text, "w");
    assert_eq!(
        meta["toolhost/next"],
        "toolhost://process/p/output?offset=8&length=1"
    );
}

#[test]
fn line_ranges_count_from_one() {
    let (_dir, path) = log(b"one\ntwo\nthree\nfour\n");
    let (text, meta) = read_uri(&path, "toolhost://process/p/output?line=2&lines=2");
    assert_eq!(text, "two\nthree\n");
    assert_eq!(meta["toolhost/range"]["lines"], 2);
    assert!(
        meta.get("toolhost/next").is_none(),
        "the range was served whole"
    );
    let (text, _) = read_uri(&path, "toolhost://process/p/output?line=3");
    assert_eq!(text, "three\nfour\n");
}

#[test]
fn a_line_range_longer_than_a_page_links_the_rest() {
    let line = format!("{}\n", "x".repeat(1023));
    let (_dir, path) = log(line.repeat(300).as_bytes());
    let (text, meta) = read_uri(&path, "toolhost://process/p/output?line=1&lines=290");
    assert_eq!(text.len() as u64, PAGE, "256 whole lines");
    assert_eq!(
        meta["toolhost/next"],
        "toolhost://process/p/output?line=257&lines=34"
    );
}

#[test]
fn a_line_longer_than_a_page_is_served_in_byte_pages() {
    let mut content = "x".repeat(PAGE as usize * 2 + 10);
    content.push('\n');
    content.push_str("after\n");
    let (_dir, path) = log(format!("short\n{content}").as_bytes());
    let (text, meta) = read_uri(&path, "toolhost://process/p/output?line=2");
    assert_eq!(text.len() as u64, PAGE, "the first page of the long line");
    assert_eq!(meta["toolhost/range"]["partial"], true);
    assert_eq!(
        meta["toolhost/next"],
        format!("toolhost://process/p/output?offset={}", 6 + PAGE),
        "the rest continues by bytes, never the same page again"
    );
    let (text, _) = read_uri(&path, "toolhost://process/p/output?line=3");
    assert_eq!(text, "after\n", "lines after it are still counted right");
}

#[test]
fn a_byte_page_cut_inside_a_character_still_moves_on() {
    // "é" is two bytes; a one-byte range starting on it must not name itself as next.
    let (_dir, path) = log("aé and more".as_bytes());
    let (text, meta) = read_uri(&path, "toolhost://process/p/output?offset=1&length=1");
    assert!(!text.is_empty());
    assert_ne!(
        meta.get("toolhost/next").and_then(|n| n.as_str()),
        Some("toolhost://process/p/output?offset=1&length=1")
    );
}
