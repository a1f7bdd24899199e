//! Credential stores hidden by the grown list, and files hidden because the content scan finds
//! a secret in them, through the real host in both tiers.

use std::process::Command;

use super::confinement::Machine;
use toolhost_e2e::{json, toolhost_bin};

/// A token of GitHub's format (fake: it grants nothing).
const GITHUB_TOKEN: &str = "ghp_8uMRqXGZ0dJYkWbTq2vLc4NfE7hA1sPx9KoY";

/// Both tiers: with the namespaces layer, and with Landlock and seccomp only.
const TIERS: [&[(&str, &str)]; 2] = [&[], &[("TOOLHOST_SANDBOX_DISABLE", "namespaces")]];

fn output(result: &serde_json::Value) -> &str {
    result["output"].as_str().unwrap_or_default()
}

fn plant(machine: &Machine, relative: &str, content: &str) {
    let path = machine.path(&format!("home/{relative}"));
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    std::fs::write(&path, content).expect("store");
}

/// `toolhost [flags] sandbox` as the machine's user; its report.
fn sandbox_report(machine: &Machine, flags: &[&str]) -> String {
    let output = Command::new(toolhost_bin())
        .current_dir(machine.path("workspace"))
        .env("HOME", machine.path("home"))
        .env("XDG_STATE_HOME", machine.path("home/.local/state"))
        .arg("--state-dir")
        .arg(machine.path("state"))
        .args(flags)
        .arg("sandbox")
        .output()
        .expect("toolhost sandbox");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `cat` of `relative` under the home fails without printing `secret`, with a note that
/// contains `why` and `--reveal`.
fn hidden(machine: &Machine, flags: &[&str], relative: &str, secret: &str, why: &str) {
    for env in TIERS {
        let result = machine.execute_with(flags, &format!("cat \"$HOME/{relative}\""), env);
        assert_ne!(
            result["exit_code"], 0,
            "{relative} was read ({env:?}): {result}"
        );
        assert!(
            !output(&result).contains(secret),
            "{relative} leaked ({env:?}): {result}"
        );
        assert!(
            output(&result).contains(why) && output(&result).contains("--reveal"),
            "{relative} ({env:?}): no note naming {why} and --reveal: {result}"
        );
    }
}

/// `cat` of `relative` under the home prints `content`, in both tiers.
fn readable(machine: &Machine, flags: &[&str], relative: &str, content: &str) {
    for env in TIERS {
        let result = machine.execute_with(flags, &format!("cat \"$HOME/{relative}\""), env);
        assert_eq!(
            output(&result),
            content,
            "{relative} not readable ({env:?}): {result}"
        );
    }
}

/// The stores of issue 37 that the list did not know, one or more of each category, are hidden
/// by the list (their content matches no rule: the list alone hides them).
#[test]
fn credential_stores_of_every_category_are_hidden_by_the_list() {
    let machine = Machine::new();
    let stores = [
        // Other agent CLIs.
        ".gemini/oauth_creds.json",
        ".config/github-copilot/hosts.json",
        ".config/github-copilot/apps.json",
        // Model hubs.
        ".cache/huggingface/token",
        ".huggingface/token",
        // Package managers.
        ".m2/settings.xml",
        ".config/pypoetry/auth.toml",
        ".composer/auth.json",
        // Containers.
        ".config/containers/auth.json",
        // Cloud.
        ".pulumi/credentials.json",
        ".databrickscfg",
        // Cluster.
        ".tsh/keys/proxy.example/user",
        ".config/helm/repositories.yaml",
        // Secret management.
        ".config/sops/age/keys.txt",
        ".config/doppler/.doppler.yaml",
        // Mail and chat.
        ".msmtprc",
        ".config/Slack/Cookies",
    ];
    for store in stores {
        plant(&machine, store, "PRIVATE TOKEN");
    }
    for store in stores {
        hidden(
            &machine,
            &[],
            store,
            "PRIVATE TOKEN",
            "on the list of hidden paths",
        );
    }
}

/// Files under names no list knows are hidden when a rule finds a secret in them; the note and
/// `toolhost sandbox` name the rule; `--reveal` takes one finding out; `--secret-scan off`
/// takes them all out.
#[test]
fn files_holding_a_secret_are_found_hidden_and_revealed() {
    let machine = Machine::new();
    let pem = "-----BEGIN PRIVATE KEY-----\n\
               MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n\
               MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n\
               -----END PRIVATE KEY-----\n";
    let files = [
        (
            ".config/mytool/creds.json",
            format!("{{\"token\": \"{GITHUB_TOKEN}\"}}\n"),
            "github-pat",
        ),
        (
            ".config/other/app.ini",
            "[database]\npassword = hunter2xyz\n".to_owned(),
            "secret-key-value",
        ),
        (".config/x/key.pem", pem.to_owned(), "private-key"),
        (
            ".local/share/chat/webhook",
            "https://hooks.slack.com/services/T01ABCDEFGH/B01ABCDEFGH/abcdefghijklmnopqrstuvwx\n"
                .to_owned(),
            "slack-webhook-url",
        ),
    ];
    for (relative, content, _) in &files {
        plant(&machine, relative, content);
    }
    for (relative, content, rule) in &files {
        let secret = content.lines().nth(1).unwrap_or(content);
        hidden(&machine, &[], relative, secret, &format!("rule {rule}"));
    }
    // `toolhost sandbox` names each finding and its rule.
    let report = sandbox_report(&machine, &[]);
    let home = machine.path("home").canonicalize().expect("home");
    for (relative, _, rule) in &files {
        assert!(
            report.contains(&format!(
                "  {} (found by the content scan: rule {rule})\n",
                home.join(relative).display()
            )),
            "{relative}: {report}"
        );
    }
    assert!(report.contains(", 4 found holding a secret"), "{report}");
    // --reveal takes one finding out; the others stay hidden.
    let creds = home.join(".config/mytool/creds.json").display().to_string();
    let reveal = ["--reveal", creds.as_str()];
    readable(&machine, &reveal, ".config/mytool/creds.json", &files[0].1);
    hidden(
        &machine,
        &reveal,
        ".config/other/app.ini",
        "hunter2xyz",
        "rule secret-key-value",
    );
    // --secret-scan off: the findings are readable.
    let off = ["--secret-scan", "off"];
    for (relative, content, _) in &files {
        readable(&machine, &off, relative, content);
    }
    assert!(
        sandbox_report(&machine, &off).contains("Content scan: off"),
        "no word that the scan is off"
    );
}

/// A file that gains a secret after a scan is hidden at the next start (the cache is keyed by
/// the file's size and times), and the cache lets a start read nothing that did not change.
#[test]
fn a_file_changed_after_a_scan_is_scanned_again() {
    let machine = Machine::new();
    plant(
        &machine,
        ".config/later/settings.toml",
        "theme = \"dark\"\n",
    );
    readable(
        &machine,
        &[],
        ".config/later/settings.toml",
        "theme = \"dark\"\n",
    );
    assert!(machine.path("state/secret-scan.json").is_file());
    plant(
        &machine,
        ".config/later/settings.toml",
        &format!("theme = \"dark\"\ngithub_token = \"{GITHUB_TOKEN}\"\n"),
    );
    hidden(
        &machine,
        &[],
        ".config/later/settings.toml",
        GITHUB_TOKEN,
        "rule github-pat",
    );
    // A corrupt cache is ignored and rebuilt.
    std::fs::write(machine.path("state/secret-scan.json"), b"{\"version\":").expect("corrupt");
    hidden(
        &machine,
        &[],
        ".config/later/settings.toml",
        GITHUB_TOKEN,
        "rule github-pat",
    );
    let cache = std::fs::read_to_string(machine.path("state/secret-scan.json")).expect("cache");
    json(&cache);
}

/// The configuration of the tools of docs/install.md and of editors, without tokens, hides
/// nothing: the scan looks at every file and finds none.
#[test]
fn a_stock_home_hides_nothing() {
    let machine = Machine::new();
    let stock = [
        (
            ".gitconfig",
            "[user]\n\tname = A Developer\n\temail = dev@example.org\n[credential]\n\thelper = \
             cache --timeout=3600\n[core]\n\teditor = vim\n[init]\n\tdefaultBranch = main\n",
        ),
        (".config/git/ignore", "target/\n*.swp\n"),
        (
            ".cargo/config.toml",
            "[build]\njobs = 2\n[net]\ngit-fetch-with-cli = true\n[registries.company]\nindex \
             = \"sparse+https://crates.company.example/index/\"\ncredential-provider = \
             \"cargo:token\"\n",
        ),
        (
            ".config/pip/pip.conf",
            "[global]\nindex-url = https://pypi.org/simple\ntimeout = 60\n",
        ),
        (
            ".config/uv/uv.toml",
            "python-preference = \"managed\"\n[[index]]\nname = \"pytorch\"\nurl = \
             \"https://download.pytorch.org/whl/cpu\"\n",
        ),
        (
            ".config/configstore/update-notifier-npm.json",
            "{\n\t\"optOut\": false,\n\t\"lastUpdateCheck\": 1700000000000\n}\n",
        ),
        (
            ".config/Code/User/settings.json",
            "{\n  \"editor.fontSize\": 14,\n  \"editor.semanticTokenColorCustomizations\": \
             {\"enabled\": true},\n  \"github.copilot.enable\": {\"*\": true},\n  \
             \"git.terminalAuthentication\": true\n}\n",
        ),
        (
            ".config/nvim/init.lua",
            "vim.opt.number = true\nvim.g.mapleader = ' '\n",
        ),
        (
            ".config/helix/config.toml",
            "theme = \"onedark\"\n[editor]\nline-number = \"relative\"\n",
        ),
        (
            ".config/llm/settings.toml",
            "token_limit = 5\npassword_prompt = true\nuse_keyring = true\npassword = \"\"\n\
             api_key = \"${OPENAI_API_KEY}\"\n",
        ),
        (
            ".config/llm/models.yaml",
            "default:\n  max_tokens: 4096\n  temperature: 0.2\n  secret: <placeholder>\n",
        ),
        (
            ".bashrc",
            "export PATH=\"$HOME/.cargo/bin:$PATH\"\nalias ll='ls -l'\n",
        ),
        (".vimrc", "set number\nsyntax on\n"),
    ];
    for (relative, content) in stock {
        plant(&machine, relative, content);
    }
    let report = sandbox_report(&machine, &[]);
    assert!(
        !report.contains("found by the content scan"),
        "a stock file was found: {report}"
    );
    assert!(report.contains(", 0 found holding a secret"), "{report}");
    let looked_at: usize = report
        .split("Content scan (--secret-scan on): ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|files| files.parse().ok())
        .unwrap_or_default();
    assert!(looked_at >= stock.len(), "{report}");
    for env in TIERS {
        let result = machine.execute_with(
            &[],
            "cat ~/.gitconfig ~/.cargo/config.toml ~/.config/llm/settings.toml \
             ~/.config/Code/User/settings.json >/dev/null && echo ok",
            env,
        );
        assert_eq!(output(&result), "ok\n", "{env:?}: {result}");
    }
}
