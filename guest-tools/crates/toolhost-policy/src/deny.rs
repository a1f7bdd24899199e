//! Deny rules: commands a policy refuses before they run ([`DenyRule`]), the command as a
//! rule sees it ([`Command`]), and the rules of the bundled guarded policy, each a `const` to
//! pick from ([`GUARDED_RULES`] holds them all).
//!
//! A rule sees the whole command text and each simple command in it (split at `;`, `&&`,
//! `||`, `|`, `&`, newlines, and with subshell parentheses, braces, `\` escapes,
//! `then`/`do`/`time`-style keywords and `sudo`/`env`/`nice`/`timeout`/`setsid`-style
//! wrappers and their options looked through), so `cd /tmp && rm -rf /` and
//! `(sudo -u root rm -rf /)` are caught as well as `rm -rf /`.
//!
//! These rules catch the usual ways a model writes a command; they are a guard rail, not a
//! security boundary: a determined command (`eval`, a script file, an encoded payload) can
//! always do what a shell can do. What commands can reach is the host's confinement.
//!
//! ```
//! use toolhost_policy::deny::{self, Command, DenyRule};
//!
//! /// `git push`, also as `git -C repo push` or `cd repo && sudo git push`.
//! fn git_push(command: &Command) -> bool {
//!     command.invocations("git").any(|args| args.iter().any(|a| a == "push"))
//! }
//!
//! const RULES: &[DenyRule] = &[
//!     DenyRule {
//!         name: "git-push",
//!         reason: "pushing is for the user to do",
//!         matches: git_push,
//!     },
//!     deny::RECURSIVE_DELETE_ROOT,
//! ];
//!
//! assert_eq!(deny::check(RULES, "cd repo && git push origin main").map(|r| r.name), Some("git-push"));
//! assert_eq!(deny::check(RULES, "git status").map(|r| r.name), None);
//! assert_eq!(deny::check(RULES, "sudo rm -rf /").map(|r| r.name), Some("recursive-delete-root"));
//! ```

/// A named rule refusing some commands before they run. The refusal (a tool error for the
/// model) names the rule and its reason, worded by [`Texts::refusal`](crate::Texts::refusal).
#[derive(Clone, Copy)]
pub struct DenyRule {
    /// Short name shown in the refusal, e.g. `recursive-delete-root`.
    pub name: &'static str,
    /// Why the rule exists, shown in the refusal and in `execute`'s description (see
    /// [`Texts::deny_summary`](crate::Texts::deny_summary)).
    pub reason: &'static str,
    /// Whether the rule refuses the command.
    pub matches: fn(&Command) -> bool,
}

/// A command as deny rules and notes see it: its text, and the simple commands and pipelines
/// in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The command exactly as given.
    pub raw: String,
    /// The whole text, lower-cased, whitespace runs folded to one space.
    pub text: String,
    /// The simple commands, each as its words: lower-cased, quotes and `\` escapes stripped,
    /// shell keywords (`then`, `do`, `time`, ...), variable assignments and wrappers
    /// (`sudo`, `env`, `nice`, `timeout`, `xargs`, ... and their options) left out, so the
    /// first word is the program that runs (possibly as a path, e.g. `/bin/rm`).
    pub simple: Vec<Vec<String>>,
    /// The pipelines, each as the words of its stages (as in [`simple`](Command::simple)).
    pub pipelines: Vec<Vec<Vec<String>>>,
}

impl Command {
    /// Split `command` for matching.
    ///
    /// ```
    /// let c = toolhost_policy::Command::parse("cd /tmp && sudo -u root RM -rf / | tee log");
    /// assert_eq!(c.simple, [vec!["cd", "/tmp"], vec!["rm", "-rf", "/"], vec!["tee", "log"]]);
    /// assert_eq!(c.pipelines.len(), 2);
    /// ```
    pub fn parse(command: &str) -> Command {
        let lowered = command.to_lowercase();
        let text = lowered.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut simple = Vec::new();
        let mut pipelines = Vec::new();
        // Split statements before folding whitespace, so newlines still separate them.
        for statement in split_any(&lowered, &[";", "&&", "||", "\n"]) {
            let mut stages = Vec::new();
            for stage in split_any(&statement, &["|&", "|", "&"]) {
                let words = words(&stage);
                if !words.is_empty() {
                    stages.push(words.clone());
                    simple.push(words);
                }
            }
            pipelines.push(stages);
        }
        Command {
            raw: command.to_string(),
            text,
            simple,
            pipelines,
        }
    }

    /// The arguments of every simple command that runs `program` (lower-case; matched by
    /// name, also when run by path such as `/usr/bin/git`).
    ///
    /// ```
    /// let c = toolhost_policy::Command::parse("git fetch; /usr/bin/git -C repo push");
    /// let pushes = c.invocations("git").filter(|args| args.contains(&"push".to_string()));
    /// assert_eq!(pushes.count(), 1);
    /// ```
    pub fn invocations<'a>(&'a self, program: &'a str) -> impl Iterator<Item = &'a [String]> + 'a {
        self.simple
            .iter()
            .filter_map(move |words| match words.split_first() {
                Some((first, args)) if program_name(first) == program => Some(args),
                _ => None,
            })
    }
}

/// The first of `rules` that refuses `command`, if any.
pub fn check<'a>(rules: &'a [DenyRule], command: &str) -> Option<&'a DenyRule> {
    matching(rules, command).into_iter().next()
}

/// Every one of `rules` that refuses `command`, in order.
pub fn matching<'a>(rules: &'a [DenyRule], command: &str) -> Vec<&'a DenyRule> {
    if rules.is_empty() {
        return Vec::new();
    }
    let parsed = Command::parse(command);
    rules.iter().filter(|r| (r.matches)(&parsed)).collect()
}

fn split_any(text: &str, seps: &[&str]) -> Vec<String> {
    let mut parts = vec![text.to_string()];
    for sep in seps {
        parts = parts
            .iter()
            .flat_map(|p| p.split(sep).map(str::to_string).collect::<Vec<_>>())
            .collect();
    }
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Shell keywords that may stand before a command.
const KEYWORDS: &[&str] = &[
    "then", "do", "else", "elif", "if", "while", "until", "time", "!",
];
/// Wrappers that run the rest of the line as a command, each with the options (lower-cased,
/// as the command text is) that take a separate argument. Every other option is a flag, so
/// `sudo -E rm`, `sudo -i rm` and `env -i rm` leave `rm` as the command.
const WRAPPERS: &[(&str, &[&str])] = &[
    ("sudo", &["-u", "-g", "-c", "-d", "-p", "-r", "-t"]),
    ("doas", &["-u", "-c"]),
    ("env", &["-u", "-c"]),
    ("command", &[]),
    ("exec", &["-a"]),
    ("builtin", &[]),
    ("nohup", &[]),
    ("nice", &["-n"]),
    ("ionice", &["-c", "-n", "-p"]),
    ("timeout", &["-s", "-k"]),
    ("stdbuf", &["-i", "-o", "-e"]),
    ("xargs", &["-n", "-p", "-i", "-d", "-l", "-s", "-a", "-e"]),
    ("setsid", &[]),
    ("chroot", &[]),
    ("unshare", &[]),
    ("nsenter", &["-t"]),
    ("runuser", &["-u", "-g"]),
    ("su", &["-c"]),
    ("flock", &["-w"]),
    ("chrt", &[]),
    ("taskset", &[]),
];

fn words(stage: &str) -> Vec<String> {
    let mut words: Vec<String> = stage
        .split_whitespace()
        .map(|w| {
            w.trim_start_matches(['(', '{', '\\'])
                .trim_end_matches([')', '}'])
                .replace(['"', '\'', '\\'], "")
        })
        .filter(|w| !w.is_empty())
        .collect();
    // Look through keywords, variable assignments and privilege/environment wrappers.
    while let Some(first) = words.first() {
        let name = program_name(first);
        if KEYWORDS.contains(&name.as_str()) || (first.contains('=') && !first.starts_with('-')) {
            words.remove(0);
            continue;
        }
        let Some((wrapper, with_argument)) = WRAPPERS.iter().find(|(w, _)| *w == name) else {
            break;
        };
        words.remove(0);
        // `sudo -u root rm`, `timeout -s KILL 5 rm`, `nice -n 10 rm`: drop the wrapper's
        // options and their arguments too.
        while let Some(word) = words.first() {
            if word == "--" {
                words.remove(0);
                break;
            }
            if with_argument.contains(&word.as_str()) {
                words.drain(..words.len().min(2));
            } else if word.starts_with('-') && word.len() > 1 {
                words.remove(0);
            } else {
                break;
            }
        }
        // Positional arguments before the command: `timeout 5s rm`, `chroot / rm`,
        // `su root -c ...`, `taskset 0x1 rm`, `chrt 10 rm`, `flock /tmp/l rm`.
        let positional = match *wrapper {
            "timeout" | "chroot" | "taskset" | "chrt" | "flock" => 1,
            _ => 0,
        };
        words.drain(..words.len().min(positional));
        // `nice -10 rm` (an old-style niceness).
        if *wrapper == "nice"
            && words
                .first()
                .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit() || c == '-'))
        {
            words.remove(0);
        }
    }
    words
}

fn program_name(word: &str) -> String {
    word.rsplit('/').next().unwrap_or(word).to_string()
}

/// `rm` with a recursive flag aimed at `/`, `/*`, `~`, `~/`, `$HOME`.
fn recursive_delete_root(c: &Command) -> bool {
    c.simple.iter().any(|w| {
        if w.first().map(|p| program_name(p)).as_deref() != Some("rm") {
            return false;
        }
        let recursive = w[1..].iter().any(|a| {
            a == "--recursive" || (a.starts_with('-') && !a.starts_with("--") && a.contains('r'))
        });
        let target = w[1..].iter().any(|a| {
            matches!(
                a.as_str(),
                "/" | "/*" | "~" | "~/" | "~/*" | "$home" | "$home/" | "$home/*" | "${home}"
            )
        });
        recursive && target
    })
}

/// Any `mkfs` variant.
fn make_filesystem(c: &Command) -> bool {
    c.simple.iter().any(|w| {
        w.first()
            .is_some_and(|p| program_name(p).starts_with("mkfs"))
    })
}

/// Block device names under `/dev/` (disks, partitions, device-mapper, md, loop devices).
const BLOCK_DEVICES: &[&str] = &[
    "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "dm-", "md", "mapper/", "disk/", "loop", "sr",
];

/// `dd` writing to a block device.
fn dd_to_device(c: &Command) -> bool {
    c.simple.iter().any(|w| {
        w.first().map(|p| program_name(p)).as_deref() == Some("dd")
            && w.iter().any(|a| {
                a.strip_prefix("of=/dev/")
                    .is_some_and(|dev| BLOCK_DEVICES.iter().any(|b| dev.starts_with(b)))
            })
    })
}

/// The classic `:(){ :|:& };:` and look-alikes.
fn fork_bomb(c: &Command) -> bool {
    let compact: String = c.text.chars().filter(|ch| !ch.is_whitespace()).collect();
    compact.contains(":(){:|:&};:") || compact.contains("(){$0|$0&}") || {
        // name(){ name|name& }; name
        compact.find("(){").is_some_and(|i| {
            let name = &compact[..i];
            let name = name.rsplit([';', '&', '|']).next().unwrap_or(name);
            !name.is_empty() && compact.contains(&format!("{{{name}|{name}&"))
        })
    }
}

/// shutdown, reboot, halt, poweroff (also via systemctl / init).
fn power_off(c: &Command) -> bool {
    c.simple.iter().any(|w| {
        let p = w.first().map(|p| program_name(p)).unwrap_or_default();
        matches!(p.as_str(), "shutdown" | "reboot" | "halt" | "poweroff")
            || (p == "systemctl"
                && w.iter()
                    .any(|a| matches!(a.as_str(), "poweroff" | "reboot" | "halt")))
            || ((p == "init" || p == "telinit") && w.iter().any(|a| a == "0" || a == "6"))
    })
}

/// A download piped straight into a shell: `curl ... | sh`, `wget -O- ... | bash`.
fn download_into_shell(c: &Command) -> bool {
    const FETCHERS: &[&str] = &["curl", "wget", "fetch"];
    const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash", "ksh", "fish"];
    const INTERPRETERS: &[&str] = &["python", "python3", "perl", "ruby", "node"];
    // An interpreter runs its stdin as a program only without a script argument (or with
    // `-`): `curl ... | python3 -m json.tool` just formats JSON.
    let runs_stdin = |stage: &[String]| {
        let name = stage.first().map(|p| program_name(p)).unwrap_or_default();
        SHELLS.contains(&name.as_str())
            || (INTERPRETERS.contains(&name.as_str())
                && stage[1..].iter().all(|a| a == "-" || a == "-u"))
    };
    c.pipelines.iter().any(|stages| {
        stages
            .iter()
            .position(|s| {
                s.first()
                    .is_some_and(|p| FETCHERS.contains(&program_name(p).as_str()))
            })
            .is_some_and(|i| stages[i + 1..].iter().any(|s| runs_stdin(s)))
    }) || (c.text.contains("<(curl") || c.text.contains("<(wget"))
}

/// A `git push` that may overwrite the remote's history: `--force`, `-f` (also in a group
/// such as `-uf`), `--force-with-lease`, `--force-if-includes`, or a refspec with a leading
/// `+`.
fn force_push(c: &Command) -> bool {
    c.invocations("git").any(|args| {
        let Some(push) = args.iter().position(|a| a == "push") else {
            return false;
        };
        args[push + 1..].iter().any(|arg| {
            arg == "--force"
                || arg.starts_with("--force-with-lease")
                || arg == "--force-if-includes"
                || (arg.starts_with('-') && !arg.starts_with("--") && arg.contains('f'))
                || (arg.starts_with('+') && arg.len() > 1)
        })
    })
}

/// Refuses a `git push` that may overwrite the remote's history (`--force`, `-f`,
/// `--force-with-lease`, a `+` refspec).
pub const FORCE_PUSH: DenyRule = DenyRule {
    name: "force-push",
    reason: "a forced push overwrites the remote's history, and others' work with it",
    matches: force_push,
};

/// Refuses `rm` with a recursive flag aimed at `/`, `/*`, `~`, `~/`, `$HOME`.
pub const RECURSIVE_DELETE_ROOT: DenyRule = DenyRule {
    name: "recursive-delete-root",
    reason: "recursive deletion of / or the home directory",
    matches: recursive_delete_root,
};

/// Refuses any `mkfs` variant.
pub const MAKE_FILESYSTEM: DenyRule = DenyRule {
    name: "make-filesystem",
    reason: "creating a filesystem (mkfs) destroys a device's data",
    matches: make_filesystem,
};

/// Refuses `dd` writing to a block device (`of=/dev/sda`, `/dev/nvme0n1`, ...).
pub const DD_TO_DEVICE: DenyRule = DenyRule {
    name: "dd-to-device",
    reason: "dd writing onto a device overwrites it",
    matches: dd_to_device,
};

/// Refuses the classic `:(){ :|:& };:` and look-alikes.
pub const FORK_BOMB: DenyRule = DenyRule {
    name: "fork-bomb",
    reason: "a fork bomb exhausts the machine's processes",
    matches: fork_bomb,
};

/// Refuses `shutdown`, `reboot`, `halt`, `poweroff` (also through `systemctl` or `init`).
pub const POWER_OFF: DenyRule = DenyRule {
    name: "power-off",
    reason: "shutting down or rebooting the machine",
    matches: power_off,
};

/// Refuses a download piped straight into a shell or interpreter: `curl ... | sh`,
/// `wget -O- ... | bash`, `sh <(curl ...)`.
pub const DOWNLOAD_INTO_SHELL: DenyRule = DenyRule {
    name: "download-into-shell",
    reason: "piping a download straight into a shell runs unreviewed code",
    matches: download_into_shell,
};

/// The bundled guarded policy's rules: every rule of this module.
pub const GUARDED_RULES: &[DenyRule] = &[
    RECURSIVE_DELETE_ROOT,
    MAKE_FILESYSTEM,
    DD_TO_DEVICE,
    FORK_BOMB,
    POWER_OFF,
    DOWNLOAD_INTO_SHELL,
    FORCE_PUSH,
];

// The rule table is tested end to end through the guarded policy component, inside the real
// host: tests/in_process/policies_fake.rs (`guarded_rules_refuse_destructive_commands_only`).

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(command: &str) -> Option<&'static str> {
        check(GUARDED_RULES, command).map(|rule| rule.name)
    }

    #[test]
    fn wrappers_and_their_options_are_looked_through() {
        for command in [
            "sudo -E rm -rf /",
            "sudo -i rm -rf /",
            "sudo -s rm -rf /",
            "sudo -u root -H rm -rf /",
            "sudo --preserve-env rm -rf /",
            "env -i rm -rf /",
            "env -i PATH=/bin rm -rf /",
            "env -u HOME rm -rf ~",
            "timeout 5s rm -rf /",
            "timeout -s KILL 10m rm -rf /",
            "nice -n 5 rm -rf /",
            "nice -10 rm -rf /",
            "ionice -c 3 rm -rf /",
            "setsid rm -rf /",
            "nohup sudo -E env -i rm -rf /",
            "xargs -0 rm -rf /",
            "sudo -- rm -rf /",
            "doas -u root rm -rf /",
            "chroot / rm -rf /",
        ] {
            assert_eq!(refused(command), Some("recursive-delete-root"), "{command}");
        }
    }

    #[test]
    fn forced_pushes_are_refused_and_plain_ones_pass() {
        for command in [
            "git push --force",
            "git push -f origin main",
            "cd repo && git -C sub push -uf origin main",
            "git push --force-with-lease=main origin main",
            "git push origin +main",
            "/usr/bin/git push --force-if-includes",
        ] {
            assert_eq!(refused(command), Some("force-push"), "{command}");
        }
        for command in [
            "git push",
            "git push origin main",
            "git fetch --force",
            "git push -u origin main",
        ] {
            assert_eq!(refused(command), None, "{command}");
        }
    }

    #[test]
    fn ordinary_commands_pass() {
        for command in [
            "sudo -E make install",
            "env -i ls /",
            "timeout 5s rm -rf ./build",
            "rm -rf target/",
            "nice -n 5 cargo build",
            "env FOO=bar printenv FOO",
        ] {
            assert_eq!(refused(command), None, "{command}");
        }
    }
}
