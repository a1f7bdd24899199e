//! How the layers of one profile are built ([`build`]), step by step: the paths it hides and
//! may write, the namespaces and their view, the network gate, the Landlock ruleset, the
//! seccomp programs and the keeper's options.
//! `ScopeSandbox` (`prepare.rs`) keeps what is built, once per scope and profile.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::landlock::{self, Plan};
use super::namespaces::{self, NamespaceError, NamespaceKind, Namespaces, TmpView};
use super::network::{AllowList, Approved, Gate};
use super::prepare::{Context, PrepareError, Prepared, PrivateSpace};
use super::probe;
use super::seccomp;
use super::{Network, Profile, SandboxMode, canonical};
use toolhost_keeper_protocol::option;

/// Package managers' caches under the home directory, writable in `workspace-write` when they
/// exist.
const CACHES_IN_HOME: &[&str] = &[
    ".cache",
    ".cargo/registry",
    ".cargo/git",
    ".npm",
    ".yarn",
    ".pnpm-store",
    ".local/share/pnpm",
    ".bun/install/cache",
    ".m2/repository",
    ".gradle/caches",
    "go/pkg/mod",
];

/// Build the layers of `profile`, with `temp` the scope's private temporary directory, as a
/// sequence of steps.
pub(super) fn build(
    context: &Context,
    profile: &Profile,
    temp: &Path,
    scope: &str,
    approved: &Arc<Approved>,
) -> Result<Prepared, PrepareError> {
    let mut times = StepTimes::new();
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute());
    // 1. The paths the profile hides and the roots it may write.
    let Roots {
        mut hidden,
        mut writable,
    } = roots(context, profile, temp, home.as_deref())?;
    times.done("roots");
    // 2. What the namespaces' view covers of the hidden paths.
    let covers = covers(context, &hidden, &writable, temp);
    times.done("covers");
    // 3. The namespaces, with their view.
    let temp = canonical(temp);
    let allow_list = profile.network.allow_list();
    let mut namespaces = view_namespaces(
        context,
        profile,
        &writable,
        &covers,
        &temp,
        allow_list.is_some(),
    )?;
    times.done("namespaces");
    // 4. The session's network gate, for an allow-list; what the person allowed widens only
    //    a gate of the operator's own list, never one a grant or a request narrowed.
    let approved = if profile.network == context.operator_network {
        approved.clone()
    } else {
        Arc::new(Approved::new(None))
    };
    let gate = start_gate(allow_list, approved, namespaces.as_mut(), scope)?;
    times.done("gate");
    // 5. What the namespaces layer could not do, said once.
    warn_of_what_is_missing(context, namespaces.as_ref());
    // 6. Landlock's roots, around the private `/tmp`.
    tmp_roots(
        profile,
        namespaces.as_ref(),
        &covers,
        &temp,
        &mut hidden,
        &mut writable,
    );
    // 7. The Unix sockets refused also inside the workspace.
    let unix_denied = unix_denied(&hidden, home.as_deref());
    times.done("paths");
    // 8. The Landlock ruleset.
    // With a network namespace of its own, `none` is enforced by it: the command may use its
    // private loopback (a test server on 127.0.0.1), and nothing else exists there. Seccomp
    // still allows only the socket families that stay inside it.
    let private_network = namespaces
        .as_ref()
        .is_some_and(|ns| ns.has(NamespaceKind::Network));
    let ruleset = landlock_rules(
        profile,
        namespaces.as_ref(),
        hidden,
        writable,
        private_network,
        context.watch_changes,
    )?;
    times.done("landlock");
    // 9. The seccomp programs.
    let unix_mode = super::unix::mode();
    let seccomp = seccomp::programs(profile.network, private_network, unix_mode)?;
    times.done("seccomp");
    // 10. The keeper's options: the Unix sockets it lets the command reach, the namespaces it
    //     joins, the limits it sets.
    let (keeper_args, nproc_rlimit) = keeper_args(
        context,
        profile,
        namespaces.as_ref(),
        unix_mode,
        &unix_denied,
        &temp,
    );
    // 11. The variables set for the command, and the sizes of the session's own places.
    let env = command_env(namespaces.is_some(), &temp, gate.as_ref());
    let private_space = namespaces.as_ref().map(|ns| private_space(context, ns));
    times.done("keeper-options");
    times.log(scope);
    Ok(Prepared {
        ruleset,
        seccomp,
        keeper_args,
        env,
        gate,
        private_space,
        late: Mutex::new(if namespaces.is_some() {
            covers.late
        } else {
            Vec::new()
        }),
        namespaces,
        nproc_rlimit,
    })
}

/// The target of the debug lines that say how long each part of a command's start took.
pub(crate) const TIMINGS: &str = "toolhost::timings";

/// How long each step of [`build`] took, said in one debug line under [`TIMINGS`]
/// (`layers built`, each step's milliseconds as a field of `steps`).
struct StepTimes {
    /// Whether debug lines of [`TIMINGS`] are wanted: nothing is timed otherwise.
    on: bool,
    /// When the last step ended.
    last: std::time::Instant,
    /// Each step's name and time.
    taken: Vec<(&'static str, std::time::Duration)>,
}

impl StepTimes {
    /// Steps timed from now.
    fn new() -> StepTimes {
        StepTimes {
            on: tracing::enabled!(target: TIMINGS, tracing::Level::DEBUG),
            last: std::time::Instant::now(),
            taken: Vec::new(),
        }
    }

    /// The step `name` ended now.
    fn done(&mut self, name: &'static str) {
        if !self.on {
            return;
        }
        let now = std::time::Instant::now();
        self.taken.push((name, now.duration_since(self.last)));
        self.last = now;
    }

    /// Say the steps' times, where debug lines of [`TIMINGS`] are wanted.
    fn log(&self, scope: &str) {
        if !self.on {
            return;
        }
        let steps = self
            .taken
            .iter()
            .map(|(name, took)| format!("{name}={:.3}", took.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
            .join(" ");
        tracing::debug!(target: TIMINGS, scope, steps, "layers built");
    }
}

/// The paths a profile hides and the roots it may write (canonical paths).
struct Roots {
    /// The host's own files, the profile's hidden paths, the user's credential stores under
    /// every home, the runtime directories and `--hide`.
    hidden: Vec<PathBuf>,
    /// The scope's private temporary directory, and in `workspace-write` the workspace, the
    /// `--writable` paths and the package managers' caches under the home.
    writable: Vec<PathBuf>,
}

/// Step 1 of [`build`]: the paths `profile` hides and the roots it may write. A writable `/` is
/// refused.
fn roots(
    context: &Context,
    profile: &Profile,
    temp: &Path,
    home: Option<&Path>,
) -> Result<Roots, PrepareError> {
    let mut hidden: Vec<PathBuf> = context.protected.iter().map(|p| canonical(p)).collect();
    hidden.extend(profile.hidden.iter().map(|p| canonical(p)));
    // The user's credential stores under every home, the runtime directories, `--hide`.
    hidden.extend(context.hidden.paths.iter().cloned());
    let mut writable = vec![canonical(temp)];
    if profile.mode == SandboxMode::WorkspaceWrite {
        writable.extend(context.workdir.as_deref().map(canonical));
        writable.extend(context.writable.iter().map(|p| canonical(p)));
        if let Some(home) = home {
            let home = canonical(home);
            // Resolved: a cache that is a link is writable where it points.
            writable.extend(
                CACHES_IN_HOME
                    .iter()
                    .map(|name| canonical(&home.join(name))),
            );
        }
    }
    if writable.iter().any(|root| root == Path::new("/")) {
        return Err(PrepareError::RootWritable);
    }
    Ok(Roots { hidden, writable })
}

/// What the namespaces' view covers of the hidden paths.
struct Covers {
    /// The directories covered whole.
    masks: Vec<PathBuf>,
    /// The files covered, sorted.
    mask_files: Vec<PathBuf>,
    /// The hidden paths under `/tmp` that are missing now, covered when they appear.
    late: Vec<PathBuf>,
}

/// Step 2 of [`build`]: what the namespaces' view covers of `hidden`, around the `writable`
/// roots and the workspace.
fn covers(context: &Context, hidden: &[PathBuf], writable: &[PathBuf], temp: &Path) -> Covers {
    // The scope's private directory is no root of the namespaces' view (only a place to mount
    // the session's tmpfs on, before anything is covered): the hidden directory that holds it
    // (the state directory) is covered all the same.
    let scratch = canonical(temp);
    let mut visible: Vec<PathBuf> = writable
        .iter()
        .filter(|root| **root != scratch)
        .cloned()
        .collect();
    visible.extend(context.workdir.as_deref().map(canonical));
    let masks = namespaces::masks(hidden, &visible);
    // Hidden paths under `/tmp` that are missing now: covered in the namespaces when they
    // appear (a missing path needs no cover yet, and a carve would take `/tmp` from the
    // commands).
    let late: Vec<PathBuf> = hidden
        .iter()
        .filter(|path| path.starts_with("/tmp") && std::fs::symlink_metadata(path).is_err())
        // Never the workspace, a writable root, or what holds one.
        .filter(|path| !visible.iter().any(|root| root.starts_with(path)))
        .cloned()
        .collect();
    // Hidden files are covered too (the system's password hashes, and every hidden path that
    // is a regular file): a cover cannot be removed or renamed from inside, and it leaves the
    // directory around it live.
    let mut mask_files = context.hidden.system_files.clone();
    mask_files.extend(
        hidden
            .iter()
            .filter(|path| std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file()))
            .cloned(),
    );
    mask_files.sort();
    mask_files.dedup();
    Covers {
        masks,
        mask_files,
        late,
    }
}

/// Step 3 of [`build`]: the namespaces of the profile, with their read-only view of the host
/// (`None` without the namespaces layer). `temp` is the scope's private temporary directory
/// (canonical). With `gate`, the helper opens an allow-list's sockets in the network namespace.
fn view_namespaces(
    context: &Context,
    profile: &Profile,
    writable: &[PathBuf],
    covers: &Covers,
    temp: &Path,
    gate: bool,
) -> Result<Option<Namespaces>, PrepareError> {
    // In the namespaces' read-only view, `/tmp` is the private temporary directory; the other
    // writable roots are bound back read-write.
    let view: Vec<PathBuf> = writable
        .iter()
        .filter(|root| **root != temp)
        .cloned()
        .collect();
    let read_only = read_only_roots(context, profile, &view);
    let request = namespaces::Request {
        masks: &covers.masks,
        mask_files: &covers.mask_files,
        writable: &view,
        read_only: &read_only,
        private_tmp: Some(temp),
        tmp_bytes: (context.tmp_bytes > 0).then_some(context.tmp_bytes),
        tmp_overlay: !probe::disabled("overlay"),
        private_network: profile.network != Network::Full,
        gate,
        pid: !probe::disabled("pid"),
        // Shared memory of the session's own: another session's files, and the host's, are
        // out of view, and the size is bounded.
        private_shm: (context.shm_bytes > 0).then_some(context.shm_bytes),
    };
    make_namespaces(context, &request)
}

/// Step 4 of [`build`]: for an allow-list, the session's gate, which serves the sockets the
/// helper opened in the network namespace. Without namespaces there is no gate: commands get
/// no network at all, like `none` (the operator's `allow=` is refused at start there; a
/// plugin's grant falls back).
fn start_gate(
    allow_list: Option<Arc<AllowList>>,
    approved: Arc<Approved>,
    namespaces: Option<&mut Namespaces>,
    scope: &str,
) -> Result<Option<Gate>, PrepareError> {
    Ok(match (allow_list, namespaces) {
        (Some(list), Some(made)) => Some(
            Gate::start(
                list,
                approved,
                std::mem::take(&mut made.gate_sockets),
                scope,
                made.holder(),
            )
            .map_err(|error| {
                PrepareError::Namespaces(NamespaceError(format!(
                    "starting the network gate: {error}"
                )))
            })?,
        ),
        (Some(_), None) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    "a network allow-list needs the namespaces layer, missing here: commands \
                     under one get no network at all (as with `none`)"
                );
            });
            None
        }
        _ => None,
    })
}

/// Step 5 of [`build`]: say once what confined commands get for want of a part of the
/// namespaces layer (an overlay on `/tmp`, the namespaces themselves).
fn warn_of_what_is_missing(context: &Context, namespaces: Option<&Namespaces>) {
    if let Some(TmpView::Private(Some(reason))) = namespaces.map(|ns| &ns.tmp) {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                %reason,
                "the kernel refused an overlay on /tmp: confined commands get an empty /tmp of \
                 their own and do not see the host's"
            );
        });
    }
    if namespaces.is_none() && !context.hidden.system_files.is_empty() {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "without namespaces, confined commands can read {} (only a mount hides them)",
                context
                    .hidden
                    .system_files
                    .iter()
                    .map(|path| path.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        });
    }
}

/// Step 6 of [`build`]: `/tmp` in Landlock's `hidden` paths and `writable` roots: the host's
/// `/tmp` without namespaces, the namespaces' own `/tmp` with them. `temp` is the scope's
/// private temporary directory (canonical).
fn tmp_roots(
    profile: &Profile,
    namespaces: Option<&Namespaces>,
    covers: &Covers,
    temp: &Path,
    hidden: &mut Vec<PathBuf>,
    writable: &mut Vec<PathBuf>,
) {
    // Landlock keeps carving every hidden path out even where the mount namespace covers it:
    // a cover goes away when what it covers is replaced from outside, and the carving keeps
    // the directories around a hidden path from being renamed.
    // Without namespaces there is no private /tmp: the host's is writable in workspace-write.
    if namespaces.is_none() && profile.mode == SandboxMode::WorkspaceWrite {
        writable.push(PathBuf::from("/tmp"));
    }
    // The namespaces' own /tmp is a new mount (an overlay, or a tmpfs), which no rule on the
    // host's tree reaches: it is granted as the host sees it through the holder, with the
    // hidden paths under /tmp carved out of it there.
    // Every hidden path under /tmp that exists is covered by a mount on that /tmp (the
    // keeper covers them again on the overlay), and a cover holds there even when the host
    // replaces what it covers (the overlay does not follow its lower layer's renames): the
    // whole of it is granted, and it stays live. Only where one is not covered (a hidden
    // directory that holds the workspace) is it carved like the host's tree.
    if let Some(tmp) = namespaces.and_then(Namespaces::tmp_root) {
        writable.retain(|root| *root != temp);
        let covered = |path: &Path| {
            covers.masks.iter().any(|mask| path.starts_with(mask))
                || covers.mask_files.iter().any(|f| f == path)
        };
        let uncovered: Vec<PathBuf> = hidden
            .iter()
            .filter_map(|path| {
                path.strip_prefix("/tmp")
                    .ok()
                    .map(|relative| (path, relative))
            })
            .filter(|(path, relative)| {
                !relative.as_os_str().is_empty()
                    && std::fs::symlink_metadata(path).is_ok()
                    && !covered(path)
            })
            .map(|(_, relative)| tmp.join(relative))
            .collect();
        hidden.extend(uncovered);
        writable.push(tmp);
    }
}

/// Step 7 of [`build`]: the places whose Unix sockets are refused also inside the workspace (a
/// workspace that is a home): the `hidden` paths and the package managers' caches under the
/// home.
fn unix_denied(hidden: &[PathBuf], home: Option<&Path>) -> Vec<PathBuf> {
    hidden
        .iter()
        .cloned()
        .chain(home.iter().flat_map(|home| {
            CACHES_IN_HOME
                .iter()
                .map(move |name| canonical(&home.join(name)))
        }))
        .collect()
}

/// Step 8 of [`build`]: the Landlock ruleset of `writable` roots and `hidden` paths, with the
/// namespaces' own `/proc` and `/dev/shm`.
fn landlock_rules(
    profile: &Profile,
    namespaces: Option<&Namespaces>,
    hidden: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    private_network: bool,
    watch: bool,
) -> Result<landlock::Rules, PrepareError> {
    // The PID namespace's own `/proc` is a new mount, which no rule on the host's `/proc`
    // reaches (Landlock does not look at a mount point hidden by another mount).
    let proc = namespaces.and_then(Namespaces::proc_root);
    // The namespaces' own `/dev/shm` is a new mount too. Without namespaces, `/dev/shm` is
    // the host's, shared with every session: not writable.
    let shm = namespaces
        .and_then(Namespaces::shm_root)
        .filter(|_| profile.mode == SandboxMode::WorkspaceWrite);
    // The plan is made again when a directory it carved changes (`landlock::Rules`): all it is
    // made of is moved in here.
    let make_plan = move |carving: &mut landlock::Carving| {
        let mut plan = Plan::new(&writable, &hidden, carving);
        plan.read.extend(proc.clone());
        plan.write.extend(shm.clone());
        plan
    };
    // Where the host sees the namespaces' view, `/proc/HOLDER/root`: which hidden paths are
    // covered there decides where commands may create entries beside them.
    let view = namespaces.map(Namespaces::root);
    Ok(landlock::Rules::new(
        Box::new(make_plan),
        landlock::Carving::new(view),
        profile.network,
        private_network,
        watch,
    )?)
}

/// Step 10 of [`build`]: the keeper's options, and whether `RLIMIT_NPROC` holds the process
/// limit. `temp` is the scope's private temporary directory (canonical).
fn keeper_args(
    context: &Context,
    profile: &Profile,
    namespaces: Option<&Namespaces>,
    unix_mode: &super::unix::UnixMode,
    unix_denied: &[PathBuf],
    temp: &Path,
) -> (Vec<String>, bool) {
    let mut keeper_args = super::unix::keeper_args(
        unix_mode,
        &super::unix::Places {
            workdir: context.workdir.as_deref().map(canonical).as_deref(),
            writable: &context
                .writable
                .iter()
                .map(|p| canonical(p))
                .collect::<Vec<_>>(),
            temp: namespaces.is_none().then_some(temp),
            private_tmp: namespaces.is_some_and(|ns| ns.tmp != TmpView::Host),
            allowed: &context.allow_unix_sockets,
            name_service: profile.network == Network::Full,
            denied: unix_denied,
        },
    );
    if let Some(namespaces) = namespaces {
        keeper_args.push(namespaces.keeper_arg());
    }
    if let Some(seconds) = profile.limits.cpu_seconds {
        keeper_args.push(format!("{}{seconds}", option::RLIMIT_CPU));
    }
    // Memory per process where no memory cgroup holds the whole command.
    if let Some(bytes) = profile.limits.memory_bytes
        && super::cgroup::hierarchies().memory.is_none()
    {
        keeper_args.push(format!("{}{bytes}", option::RLIMIT_DATA));
    }
    // Processes where no pids cgroup holds the command: RLIMIT_NPROC, which the kernel counts
    // per user and user namespace, so in the scope's namespace it bounds the processes of the
    // scope's commands of this profile together.
    let nproc_rlimit =
        profile.limits.processes.is_some() && namespaces::nproc_limit_applies(namespaces.is_some());
    if let Some(processes) = profile.limits.processes
        && nproc_rlimit
    {
        keeper_args.push(format!("{}{processes}", option::RLIMIT_NPROC));
    }
    (keeper_args, nproc_rlimit)
}

/// Step 11 of [`build`]: the variables set for the command: `TMPDIR`, the scope's private
/// temporary directory `temp` (in the namespaces, `/tmp` itself), and the `gate`'s.
fn command_env(with_namespaces: bool, temp: &Path, gate: Option<&Gate>) -> Vec<(String, String)> {
    std::iter::once((
        "TMPDIR".to_owned(),
        if with_namespaces {
            "/tmp".to_owned()
        } else {
            temp.display().to_string()
        },
    ))
    .chain(gate.into_iter().flat_map(Gate::env))
    .collect()
}

/// Step 11 of [`build`]: the sizes of the session's own `/tmp` and `/dev/shm` in `namespaces`.
fn private_space(context: &Context, namespaces: &Namespaces) -> PrivateSpace {
    PrivateSpace {
        tmp: (namespaces.tmp != TmpView::Host && context.tmp_bytes > 0)
            .then_some(context.tmp_bytes),
        shm: namespaces.shm_root().and(Some(context.shm_bytes)),
    }
}

/// Shell start-up files and git's global configuration under a home: run or read by the user's
/// shells and git outside the sandbox.
const RUN_LATER_IN_HOME: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".config/fish",
    ".gitconfig",
    ".config/git",
];

/// What the namespaces' view binds read-only though it lies in a writable root or under `/tmp`
/// (canonical paths, existing ones):
/// 1. Under `/tmp` or `/dev/shm`, what this profile may not write: every home, and the
///    workspace in `read-only`. The session's own `/tmp` would otherwise take their writes and
///    drop them when the session ends, and its own `/dev/shm` would hide them; bound, they are
///    the host's, live and read-only.
/// 2. In each writable root, unless the operator allows it (`--allow-hook-writes`), what runs
///    later outside the sandbox: the hooks of git repositories (`.git/hooks`, and those of
///    submodules under `.git/modules`), and the shell start-up files and git configuration of
///    a home inside the root.
fn read_only_roots(context: &Context, profile: &Profile, writable: &[PathBuf]) -> Vec<PathBuf> {
    let private = [Path::new("/tmp"), Path::new("/dev/shm")];
    let is_writable = |path: &Path| writable.iter().any(|root| path.starts_with(root));
    let mut roots = Vec::new();
    let homes: Vec<PathBuf> = context.hidden.homes.iter().map(|h| canonical(h)).collect();
    let workdir = context.workdir.as_deref().map(canonical);
    for path in homes.iter().chain(workdir.iter()) {
        let under_private = private
            .iter()
            .any(|place| path.starts_with(place) && path != place);
        if under_private && !is_writable(path) && path.exists() {
            roots.push(path.clone());
        }
    }
    if profile.mode == SandboxMode::WorkspaceWrite && !context.allow_hook_writes {
        for root in writable {
            roots.extend(git_hooks(root));
        }
        for home in homes.iter().filter(|home| is_writable(home)) {
            roots.extend(
                RUN_LATER_IN_HOME
                    .iter()
                    .map(|name| home.join(name))
                    .filter(|path| std::fs::symlink_metadata(path).is_ok()),
            );
        }
    }
    roots.sort();
    roots.dedup();
    roots
}

/// The hooks directories of the git repository at `root` (its `.git` directory's `hooks`, and
/// those of the submodules' git directories under `.git/modules`, a few levels deep). A
/// repository without one gets an empty one, as `git init` makes it, so that there is a place
/// to bind read-only.
fn git_hooks(root: &Path) -> Vec<PathBuf> {
    let git = root.join(".git");
    if !std::fs::symlink_metadata(&git).is_ok_and(|meta| meta.is_dir()) {
        return Vec::new();
    }
    let mut hooks = Vec::new();
    let mut repos = vec![(git, 0)];
    while let Some((dir, depth)) = repos.pop() {
        let dir_hooks = dir.join("hooks");
        if std::fs::symlink_metadata(&dir_hooks).is_err() {
            let _ = std::fs::create_dir(&dir_hooks);
        }
        if std::fs::symlink_metadata(&dir_hooks).is_ok_and(|meta| meta.is_dir()) {
            hooks.push(dir_hooks);
        }
        // A submodule's git directory is `.git/modules/NAME` (NAME may hold slashes, and a
        // submodule's own submodules are under its `modules`).
        if depth < 4
            && let Ok(entries) = std::fs::read_dir(dir.join("modules"))
        {
            let mut stack: Vec<(PathBuf, usize)> = entries
                .flatten()
                .map(|entry| (entry.path(), depth + 1))
                .collect();
            while let Some((path, depth)) = stack.pop() {
                let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.is_dir());
                if !is_dir || depth > 4 {
                    continue;
                }
                if path.join("HEAD").is_file() {
                    repos.push((path, depth));
                } else if let Ok(entries) = std::fs::read_dir(&path) {
                    stack.extend(entries.flatten().map(|entry| (entry.path(), depth + 1)));
                }
            }
        }
    }
    hooks
}

/// The namespaces layer, or `None` (logged once, and reported by `toolhost sandbox`) where it
/// is disabled or the kernel refuses it: Landlock and seccomp enforce the profile alone then.
/// Where the layer is there but fails for this profile (namespaces were made before in this
/// process, or the kernel did not refuse the user namespace itself), the profile is refused.
fn make_namespaces(
    context: &Context,
    request: &namespaces::Request<'_>,
) -> Result<Option<Namespaces>, PrepareError> {
    if probe::disabled("namespaces") {
        return Ok(None);
    }
    if !context.namespaces_layer {
        return Ok(None);
    }
    let Ok(keeper) = crate::keeper_binary::executable() else {
        return Ok(None);
    };
    match namespaces::make(keeper, request) {
        Ok(made) => {
            if let Some(reason) = &made.pid_missing {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        %reason,
                        "commands share the host's PID namespace (no PID namespace of their own)"
                    );
                });
            }
            Ok(Some(made))
        }
        Err(error) if namespaces::ever_made() || !error.missing_here() => {
            Err(PrepareError::Namespaces(error))
        }
        Err(error) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    %error,
                    "commands are confined without namespaces (Landlock and seccomp only)"
                );
            });
            Ok(None)
        }
    }
}
