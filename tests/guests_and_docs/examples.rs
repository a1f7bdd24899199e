//! The examples, run as tests. `examples/test_policy.rs` checks a policy on the fake process
//! capability and fails when a check does; here it runs against the bundled default policy and
//! against both bundled policies loaded as plugin files. (`cargo test` also compiles every
//! example, `agent_loop` included.)

use crate::test_policy;
use toolhost::bundled;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_policy_example_passes_on_the_bundled_policy() {
    test_policy::check_policy(None)
        .await
        .expect("the example's checks pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_policy_example_passes_on_policy_files() {
    let dir = tempfile::tempdir().expect("dir");
    for policy in [bundled::DEFAULT, bundled::GUARDED] {
        let path = dir.path().join(policy.file_name);
        std::fs::write(&path, policy.bytes).expect("write component");
        test_policy::check_policy(Some(&path))
            .await
            .unwrap_or_else(|e| panic!("{}: {e:#}", policy.name));
    }
}
