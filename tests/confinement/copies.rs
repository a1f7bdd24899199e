//! Secrets that get out around the list of hidden paths: copies of hidden files (a dotfiles
//! repository at the home, backups beside a hidden file) and secret values under innocent
//! variable names. Each case runs a real `toolhost call execute` on a fake machine, in both
//! tiers where they differ.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::confinement::Machine;

/// The environments of the two tiers: with namespaces, and with Landlock alone (forced).
const TIERS: [&[(&str, &str)]; 2] = [&[], &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")]];

fn tier(env: &[(&str, &str)]) -> &'static str {
    if env.is_empty() {
        "namespaces"
    } else {
        "Landlock alone"
    }
}

fn output(result: &serde_json::Value) -> &str {
    result["output"].as_str().unwrap_or_default()
}

/// `git ARGS` in `dir` as the user would run it, with no configuration of the machine's.
fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .stdout(Stdio::null())
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// The secret in the fake home's `~/.npmrc`.
const NPM_SECRET: &str = "npm-secret-in-the-object-store";

#[test]
fn a_dotfiles_repository_at_the_home_does_not_give_away_what_it_tracks() {
    let machine = Machine::new();
    let home = machine.path("home");
    std::fs::write(
        home.join(".npmrc"),
        format!("//registry.npmjs.org/:_authToken={NPM_SECRET}\n"),
    )
    .expect("npmrc");
    std::fs::write(home.join(".bashrc"), "# bashrc\n").expect("bashrc");
    // A dotfiles repository at the home: `git init`, `git add .npmrc`, `git commit`.
    git(&home, &["init", "-q"]);
    git(&home, &["add", ".npmrc", ".bashrc"]);
    git(&home, &["commit", "-q", "-m", "dotfiles"]);
    // A project under the home tracks an `.npmrc` of its own: it stays.
    let project = home.join("project");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(project.join(".npmrc"), "registry=https://project.example\n").expect("npmrc");
    git(&project, &["init", "-q"]);
    git(&project, &["add", ".npmrc"]);
    git(&project, &["commit", "-q", "-m", "project"]);
    for env in TIERS {
        let output_of = |command: &str| machine.run(&[], command, env);
        let run = output_of("git -C \"$HOME\" show HEAD:.npmrc; git -C \"$HOME\" log --oneline");
        let result = toolhost_e2e::json(&String::from_utf8_lossy(&run.stdout));
        assert_ne!(result["exit_code"], 0, "{}: {result}", tier(env));
        assert!(
            !output(&result).contains(NPM_SECRET),
            "{}: the dotfiles repository gave .npmrc away: {result}",
            tier(env)
        );
        // The host said so at its start.
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            stderr.contains("a git directory under a home is hidden")
                && stderr.contains(&format!("{}", home.join(".npmrc").display())),
            "{}: no warning: {stderr}",
            tier(env)
        );
        // Nor do its objects, read as files.
        let result = machine.execute_with(
            &[],
            "cat \"$HOME\"/.git/objects/*/* 2>/dev/null | wc -c",
            env,
        );
        assert!(
            output(&result).starts_with("0\n"),
            "{}: the object store is readable: {result}",
            tier(env)
        );
        // A workspace at the home keeps its files, and loses its repository: git there finds
        // none.
        let workdir = ["--workdir", home.to_str().expect("utf-8")];
        let result = machine.execute_with(
            &workdir,
            "git show HEAD:.npmrc; cat .git/objects/*/* 2>/dev/null | wc -c; \
             echo ok > project/notes.txt && cat project/notes.txt && git status",
            env,
        );
        assert_ne!(result["exit_code"], 0, "{}: {result}", tier(env));
        assert!(
            !output(&result).contains(NPM_SECRET) && output(&result).contains("\n0\nok\n"),
            "{}: {result}",
            tier(env)
        );
        // The project's own repository is untouched.
        let result = machine.execute_with(&[], "git -C \"$HOME/project\" show HEAD:.npmrc", env);
        assert_eq!(
            output(&result),
            "registry=https://project.example\n",
            "{}: {result}",
            tier(env)
        );
    }
}

#[test]
fn a_bare_dotfiles_repository_used_with_the_home_as_work_tree_is_hidden() {
    let machine = Machine::new();
    let home = machine.path("home");
    std::fs::write(
        home.join(".npmrc"),
        format!("//registry.npmjs.org/:_authToken={NPM_SECRET}\n"),
    )
    .expect("npmrc");
    // The bare-repository setup: `git init --bare ~/.cfg`, then `git --git-dir=$HOME/.cfg
    // --work-tree=$HOME` (the `config` alias) to add and commit.
    git(&home, &["init", "-q", "--bare", ".cfg"]);
    let git_dir = format!("--git-dir={}", home.join(".cfg").display());
    let work_tree = format!("--work-tree={}", home.display());
    git(&home, &[&git_dir, &work_tree, "add", ".npmrc"]);
    git(
        &home,
        &[&git_dir, &work_tree, "commit", "-q", "-m", "dotfiles"],
    );
    for env in TIERS {
        let result = machine.execute_with(
            &[],
            "git --git-dir=\"$HOME/.cfg\" --work-tree=\"$HOME\" show HEAD:.npmrc",
            env,
        );
        assert_ne!(result["exit_code"], 0, "{}: {result}", tier(env));
        assert!(
            !output(&result).contains(NPM_SECRET),
            "{}: the bare repository gave .npmrc away: {result}",
            tier(env)
        );
    }
}

#[test]
fn backups_beside_hidden_files_are_hidden_with_them() {
    let machine = Machine::new();
    let home = machine.path("home");
    std::fs::write(home.join(".npmrc~"), "npm-backup-secret\n").expect("backup");
    std::fs::write(home.join(".pypirc.bak"), "pypi-backup-secret\n").expect("backup");
    // A `--hide` path's backups are hidden too.
    let vault = machine.path("outside/vault.txt");
    std::fs::write(&vault, "vault-secret\n").expect("vault");
    std::fs::write(
        machine.path("outside/vault.txt.orig"),
        "vault-backup-secret\n",
    )
    .expect("orig");
    let hide = vault.display().to_string();
    let outside = machine.path("outside").display().to_string();
    for env in TIERS {
        for (what, command) in [
            ("~/.npmrc~", "cat \"$HOME/.npmrc~\"".to_owned()),
            ("~/.pypirc.bak", "cat \"$HOME/.pypirc.bak\"".to_owned()),
            (
                "a --hide path's backup",
                format!("cat {outside}/vault.txt.orig"),
            ),
        ] {
            let result = machine.execute_with(&["--hide", &hide], &command, env);
            assert_ne!(result["exit_code"], 0, "{} {what}: {result}", tier(env));
            assert!(
                !output(&result).contains("secret"),
                "{} {what} leaked: {result}",
                tier(env)
            );
        }
        // What is beside them and no backup stays readable.
        let result = machine.execute_with(&["--hide", &hide], "cat \"$HOME/.profile\"", env);
        assert_eq!(output(&result), "# profile", "{}: {result}", tier(env));
    }
}

#[test]
fn secret_values_under_innocent_names_are_withheld() {
    let machine = Machine::new();
    let secrets = [
        ("PG_CONN", "host=db user=u password=pg-secret"),
        (
            "JDBC_URL",
            "jdbc:postgresql://db:5432/app?user=u&password=jdbc-secret",
        ),
        (
            "AZURE_STORAGE_CONNECTION_STRING",
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=azure-secret==;EndpointSuffix=core.windows.net",
        ),
        (
            "SLACK_WEBHOOK_URL",
            "https://hooks.slack.com/services/T00000000/B00000000/slacksecretslacksecret",
        ),
        ("STRIPE_SK", "sk_live_stripesecret4eC39HqLyjWD"),
        (
            "CI_JOB_JWT",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.jwtsecretSflKxwRJSMeKKF2QT4fw",
        ),
        // Innocent names, secret values.
        (
            "NOTIFY_URL",
            "https://discord.com/api/webhooks/123456789/discordsecret",
        ),
        (
            "SETTINGS",
            "--header=x-api: ghp_githubsecretA1b2C3d4E5f6G7h8I9j0K1l2",
        ),
    ];
    let ordinary = [
        ("LS_COLORS", "rs=0:di=01;34:ln=01;36:*.tar=01;31:"),
        ("SSH_CONNECTION", "192.0.2.10 51234 192.0.2.20 22"),
        ("HISTCONTROL", "ignoreboth"),
        ("npm_config_registry", "https://registry.npmjs.org/"),
        ("GIT_AUTHOR_NAME", "A U Thor"),
        ("CARGO_TERM_COLOR", "always"),
        ("PLAIN", "p1"),
    ];
    let env: Vec<(&str, &str)> = secrets.iter().chain(&ordinary).copied().collect();
    let result = machine.execute_with(&[], "env", &env);
    let text = output(&result);
    for (name, value) in secrets {
        assert!(
            !text.contains(&format!("{name}=")) && !text.contains(value),
            "{name} reached the command: {result}"
        );
    }
    for (name, value) in ordinary {
        assert!(
            text.contains(&format!("{name}={value}\n")),
            "{name} was withheld: {result}"
        );
    }
    // Unconfined, the same host passes them all: the variables did reach it.
    let result = machine.execute_with(&["--sandbox", "off"], "env", &env);
    for (name, value) in secrets {
        assert!(
            output(&result).contains(&format!("{name}={value}\n")),
            "{name} never reached the host: {result}"
        );
    }
}
