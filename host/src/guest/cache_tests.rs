use super::*;
use std::os::unix::fs::PermissionsExt;

/// The smallest component there is: `(component)`.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").mode() & 0o777
}

#[test]
fn a_missing_cache_dir_is_created_private() {
    let base = tempfile::tempdir().expect("tempdir");
    let dir = base.path().join("a/b/components");
    assert!(ComponentCache::open(&dir).is_some());
    assert_eq!(mode(&dir), 0o700);
}

#[test]
fn a_cache_dir_others_may_write_is_refused() {
    let base = tempfile::tempdir().expect("tempdir");
    for bits in [0o777, 0o770, 0o702] {
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(bits))
            .expect("chmod");
        let reason = prepare(base.path(), uid()).expect_err("refused");
        assert!(reason.contains("lets group or others write it"), "{reason}");
        assert!(ComponentCache::open(base.path()).is_none());
    }
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    assert!(
        ComponentCache::open(base.path()).is_some(),
        "readable is fine"
    );
}

#[test]
fn a_cache_dir_another_user_owns_is_refused() {
    // Ownership by someone else, forced by asking on behalf of another uid.
    let base = tempfile::tempdir().expect("tempdir");
    let other = uid().wrapping_add(1);
    let reason = prepare(base.path(), other).expect_err("refused");
    assert!(reason.contains("not by the current user"), "{reason}");
    assert!(prepare(base.path(), uid()).is_ok());
}

#[test]
fn a_cache_path_that_is_a_file_is_refused() {
    let base = tempfile::tempdir().expect("tempdir");
    let file = base.path().join("file");
    std::fs::write(&file, b"x").expect("write");
    assert!(ComponentCache::open(&file).is_none());
}

#[test]
fn the_cache_key_follows_the_component_and_the_engine() {
    let engine = Engine::default();
    let key = cache_key(&engine, &digest(EMPTY_COMPONENT));
    assert_eq!(key.len(), 40);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        key,
        cache_key(&Engine::default(), &digest(EMPTY_COMPONENT)),
        "stable"
    );
    assert_ne!(key, cache_key(&engine, &digest(b"\0asm\x0d\x00\x01\x00 ")));
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    let other = Engine::new(&config).expect("engine");
    assert_ne!(
        key,
        cache_key(&other, &digest(EMPTY_COMPONENT)),
        "engine configuration counts"
    );
}

#[tokio::test]
async fn compiled_components_are_cached_privately_and_foreign_files_ignored() {
    let base = tempfile::tempdir().expect("tempdir");
    let cache = ComponentCache::open(&base.path().join("c")).expect("cache");
    let engine = Engine::default();
    let path = cache.path(&engine, &digest(EMPTY_COMPONENT));

    compile(&engine, "t", EMPTY_COMPONENT, None, Some(&cache))
        .await
        .expect("compiles");
    assert_eq!(mode(&path), 0o600, "cached privately");
    assert!(
        load_cached(&engine, "t", &path).is_some(),
        "the cached copy loads"
    );

    // A good compiled copy that others may write: not loaded (they could have planted it),
    // and replaced by a private one.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    assert!(load_cached(&engine, "t", &path).is_none());
    compile(&engine, "t", EMPTY_COMPONENT, None, Some(&cache))
        .await
        .expect("compiles");
    assert_eq!(mode(&path), 0o600, "replaced by a private file");
    assert!(load_cached(&engine, "t", &path).is_some());

    // A corrupt private file: ignored, compiled afresh.
    std::fs::write(&path, b"corrupt").expect("corrupt");
    assert!(load_cached(&engine, "t", &path).is_none());
    compile(&engine, "t", EMPTY_COMPONENT, None, Some(&cache))
        .await
        .expect("compiles again");
    assert!(load_cached(&engine, "t", &path).is_some());
}

#[tokio::test]
async fn a_known_digest_finds_the_same_cached_copy() {
    let base = tempfile::tempdir().expect("tempdir");
    let cache = ComponentCache::open(base.path()).expect("cache");
    let engine = Engine::default();
    let digest = digest(EMPTY_COMPONENT);
    let taken = compile(&engine, "t", EMPTY_COMPONENT, None, Some(&cache))
        .await
        .expect("compiles");
    let given = compile(&engine, "t", EMPTY_COMPONENT, Some(digest), Some(&cache))
        .await
        .expect("compiles");
    assert_eq!(taken.cached, given.cached);
    assert!(given.cached.is_some_and(|path| path.is_file()));
    assert_eq!(parse_digest(&hex(&digest)), Some(digest));
    assert_eq!(parse_digest("not hex"), None);
    assert_eq!(parse_digest(&"zz".repeat(32)), None);
}

fn tool(name: &str) -> ToolDefinition {
    ToolDefinition {
        name: name.to_owned(),
        description: "does \"things\"\n".to_owned(),
        input_schema: r#"{"type":"object"}"#.to_owned(),
        output_schema: None,
        title: Some("A tool".to_owned()),
        annotations: ToolAnnotations {
            read_only: Some(true),
            destructive: None,
            idempotent: Some(false),
            open_world: None,
        },
    }
}

#[test]
fn tool_lists_are_kept_per_configuration_and_read_back_whole() {
    let base = tempfile::tempdir().expect("tempdir");
    let cwasm = base.path().join("abc.cwasm");
    let path = tools_path(&cwasm, "{}", "settings");
    assert_ne!(path, tools_path(&cwasm, r#"{"a":1}"#, "settings"));
    assert_ne!(path, tools_path(&cwasm, "{}", "other settings"));
    assert_ne!(
        path,
        tools_path(&cwasm, "{}s", "ettings"),
        "parts are delimited"
    );
    assert!(load_tools(&path).is_none(), "nothing cached yet");
    let tools = vec![tool("one"), tool("two")];
    store_tools(&path, &tools);
    assert_eq!(mode(&path), 0o600);
    let back = load_tools(&path).expect("read back");
    assert_eq!(format!("{back:?}"), format!("{tools:?}"));

    // Others may write it: not used. Cut short or of another shape: not used.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    assert!(load_tools(&path).is_none());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let text = std::fs::read_to_string(&path).expect("read");
    std::fs::write(&path, &text[..text.len() / 2]).expect("cut");
    assert!(load_tools(&path).is_none());
    std::fs::write(&path, r#"[{"name":"x"}]"#).expect("write");
    assert!(load_tools(&path).is_none());
}
