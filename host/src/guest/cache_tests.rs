use super::*;
use std::os::unix::fs::PermissionsExt;

/// The smallest component there is: `(component)`.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
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
    let key = cache_key(&engine, EMPTY_COMPONENT);
    assert_eq!(key.len(), 40);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        key,
        cache_key(&Engine::default(), EMPTY_COMPONENT),
        "stable"
    );
    assert_ne!(key, cache_key(&engine, b"\0asm\x0d\x00\x01\x00 "));
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    let other = Engine::new(&config).expect("engine");
    assert_ne!(
        key,
        cache_key(&other, EMPTY_COMPONENT),
        "engine configuration counts"
    );
}

#[tokio::test]
async fn compiled_components_are_cached_privately_and_foreign_files_ignored() {
    let base = tempfile::tempdir().expect("tempdir");
    let cache = ComponentCache::open(&base.path().join("c")).expect("cache");
    let engine = Engine::default();
    let path = cache.path(&engine, EMPTY_COMPONENT);

    compile(&engine, "t", EMPTY_COMPONENT, Some(&cache))
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
    compile(&engine, "t", EMPTY_COMPONENT, Some(&cache))
        .await
        .expect("compiles");
    assert_eq!(mode(&path), 0o600, "replaced by a private file");
    assert!(load_cached(&engine, "t", &path).is_some());

    // A corrupt private file: ignored, compiled afresh.
    std::fs::write(&path, b"corrupt").expect("corrupt");
    assert!(load_cached(&engine, "t", &path).is_none());
    compile(&engine, "t", EMPTY_COMPONENT, Some(&cache))
        .await
        .expect("compiles again");
    assert!(load_cached(&engine, "t", &path).is_some());
}
