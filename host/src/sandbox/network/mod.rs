//! Network by name (`--network allow=PATTERN,...`): a session's commands run in a network
//! namespace with no route out, and reach the hosts of an allow-list through a proxy of the
//! host's, the session's *gate*.
//!
//! 1. The namespaces helper opens the gate's sockets on the namespace's loopback and hands
//!    them to the host (`keeper/src/network.rs`); the view's `/etc/resolv.conf` names that
//!    loopback.
//! 2. [`Gate::start`] serves them on the gate's own runtime: the proxy ([`proxy`]) on the TCP
//!    listeners, the resolver stub ([`dns`]) on the UDP sockets.
//! 3. Commands get the proxy in their variables ([`Gate::env`]).
//! 4. Every refusal is recorded ([`Refusals`]) with the process that made it ([`owner`]), and
//!    logged once per host; a command's output ends with a note naming the hosts it was refused
//!    ([`note`]).
//!
//! [`allow`] parses and matches the list; [`resolve`] decides where an allowed name may be
//! reached.
//!
//! Under `--network ask`, a connection to a host the person may allow waits while a call of
//! the session that can ask a form is in progress ([`HostQuestion`], held with
//! [`Approved::hold`]): the person is asked, and on "allow" the host is allowed for the
//! session and the connection goes on. With nobody to ask now, it is refused, and the
//! refusal is marked askable for the policy to ask after the command.

mod allow;
mod dns;
mod owner;
mod proxy;
mod resolve;

pub use allow::{
    AllowList, AllowListId, Askable, Host, MAX_LISTS, MAX_LISTS_PER_OWNER, Pattern, PatternError,
};
pub use resolve::{Resolver, TEST_PUBLIC, TEST_RESOLVE, non_public};

use std::collections::{HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock};

use super::diagnose;
use crate::lock;

/// Most refusals a gate remembers (the oldest go first).
const MAX_REFUSALS: usize = 256;
/// Most connections a gate serves at once; more wait to be accepted. A connection whose
/// request head is not in within [`proxy::HEADER_TIMEOUT`] (or idle that long between
/// requests) is closed, freeing its place.
const MAX_CONNECTIONS: usize = 256;
/// Most refused hosts one note names.
pub(crate) const MAX_NAMED: usize = 8;

/// One refused connection or lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// When (milliseconds since the Unix epoch).
    pub(crate) at_ms: u64,
    /// The host asked for, with its port for a connection.
    pub(crate) host: String,
    /// Why.
    pub(crate) reason: String,
    /// The pids of the process that made the request and of its ancestors (a command's keeper
    /// among them); empty when it could not be told.
    pub(crate) chain: Vec<i32>,
    /// Whether the session's person may allow it (a connection to a host within the
    /// operator's `--network ask`).
    pub(crate) askable: bool,
}

/// What a gate refused, newest last.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// The scope (session) whose gate it is, for the log (and the session's MCP log).
    scope: String,
    entries: Mutex<VecDeque<Refusal>>,
    /// Hosts logged already (each is logged once).
    logged: Mutex<HashSet<String>>,
}

impl Refusals {
    /// Record a refusal of `host` to the process `chain` (see [`Refusal::chain`]), and log it
    /// the first time.
    #[cfg(test)]
    fn record(&self, host: String, reason: String, chain: Vec<i32>) {
        self.record_askable(host, reason, chain, false);
    }

    /// [`Self::record`], saying whether the session's person may allow the host.
    fn record_askable(&self, host: String, reason: String, chain: Vec<i32>, askable: bool) {
        {
            let mut logged = lock(&self.logged);
            if logged.len() < MAX_REFUSALS && logged.insert(host.clone()) {
                tracing::warn!(
                    scope = %self.scope,
                    %host,
                    %reason,
                    "the network gate refused a confined command"
                );
            }
        }
        let mut entries = lock(&self.entries);
        if entries.len() == MAX_REFUSALS {
            entries.pop_front();
        }
        entries.push_back(Refusal {
            at_ms: unix_ms(),
            host,
            reason,
            chain,
            askable,
        });
    }

    /// The process chain of the last refusal of `host` (empty when none).
    fn last_chain(&self, host: &str) -> Vec<i32> {
        lock(&self.entries)
            .iter()
            .rev()
            .find(|refusal| refusal.host == host)
            .map(|refusal| refusal.chain.clone())
            .unwrap_or_default()
    }

    /// The refusals since `since_ms` of the command whose keeper is `keeper` (and those whose
    /// process could not be told), one per host (its first reason), oldest first.
    pub(crate) fn since(&self, since_ms: u64, keeper: Option<i32>) -> Vec<Refusal> {
        let entries = lock(&self.entries);
        let mut seen = HashSet::new();
        entries
            .iter()
            .filter(|refusal| refusal.at_ms >= since_ms)
            .filter(|refusal| {
                refusal.chain.is_empty()
                    || keeper.is_some_and(|keeper| refusal.chain.contains(&keeper))
            })
            .filter(|refusal| seen.insert(refusal.host.clone()))
            .cloned()
            .collect()
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The reason the resolver gives a name the allow-list does not hold: the one refusal that
/// allowing the name can undo.
const NOT_LISTED: &str = "not in the allow-list";

/// Most askable refusals a session remembers (the oldest go first).
const MAX_ASKABLE: usize = 256;

/// The most hosts a session's person may allow beyond the allow-list.
pub const MAX_ALLOWED_HOSTS: usize = 64;

/// The future a [`HostQuestion`] returns.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Asks a session's person, while one of its commands waits on a connection, whether the
/// session may reach a host its gate would refuse.
pub trait HostQuestion: Send + Sync {
    /// Whether the person allows `host` (`example.com:443`) for the rest of the session.
    /// `false` for any other answer, or none within the asker's time.
    fn allow<'a>(&'a self, host: &'a str) -> BoxFuture<'a, bool>;
}

/// The most questions a session's commands may put to the person while waiting on a
/// connection; past them, a connection is refused at once (and its host is askable after the
/// command).
pub const MAX_WAITING_QUESTIONS: usize = 16;

/// A question held by a call in progress, and what its end cancels.
struct HeldEntry {
    id: u64,
    question: Arc<dyn HostQuestion>,
    /// Cancelled when the call that held it ends: a question pending then is dropped.
    ended: tokio_util::sync::CancellationToken,
}

/// Who can be asked while a command runs: the calls in progress that can ask, newest last.
#[derive(Default)]
struct Live {
    next: u64,
    questions: Vec<HeldEntry>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("questions", &self.questions.len())
            .finish()
    }
}

/// Keeps a [`HostQuestion`] askable while it lives ([`Approved::hold`]).
#[derive(Debug)]
pub struct HeldQuestion {
    approved: std::sync::Weak<Approved>,
    id: u64,
}

impl Drop for HeldQuestion {
    /// The call ended: its question is asked no more, and one pending is dropped.
    fn drop(&mut self) {
        if let Some(approved) = self.approved.upgrade() {
            lock(&approved.live).questions.retain(|held| {
                if held.id == self.id {
                    held.ended.cancel();
                }
                held.id != self.id
            });
        }
    }
}

/// The hosts a session's person allowed beyond its allow-list, for the session's gates that
/// apply the operator's own list (a gate narrowed by a plugin's grant or a request is never
/// widened: it gets none).
#[derive(Debug, Default)]
pub(crate) struct Approved {
    patterns: Mutex<Vec<Pattern>>,
    /// What the person may allow (the operator's `--network ask`); `None`: nothing.
    askable: Option<Askable>,
    /// The askable hosts the session's gates refused, as they named them (`example.com:443`):
    /// the only hosts that may be allowed.
    refused: Mutex<VecDeque<String>>,
    /// Who can be asked while a command waits on a connection.
    live: Mutex<Live>,
    /// One question at a time: a connection waits for the question before it, whatever its
    /// host.
    asking: tokio::sync::Mutex<()>,
    /// The hosts asked about while a command waited, with the answer: each is asked once a
    /// session, and at most [`MAX_WAITING_QUESTIONS`] are.
    asked: Mutex<Vec<(String, bool)>>,
}

impl Approved {
    /// Nothing allowed yet; the person may allow what `askable` holds.
    pub(crate) fn new(askable: Option<Askable>) -> Approved {
        Approved {
            askable,
            ..Approved::default()
        }
    }

    /// Whether the person may allow `host` (as a gate names it, `example.com:443`), refused
    /// for `reason`: a name with its port, refused only for not being listed, within the
    /// operator's askable hosts. An address never is: the allow-list must name it.
    fn may_allow(&self, host: &str, reason: &str) -> bool {
        let Some(askable) = &self.askable else {
            return false;
        };
        reason == NOT_LISTED
            && Pattern::parse(host)
                .is_ok_and(|pattern| pattern.is_named_port() && askable.allows(&pattern))
    }

    /// Note that a gate refused `host`, which the person may allow.
    pub(crate) fn note_refused(&self, host: &str) {
        let mut refused = lock(&self.refused);
        if refused.iter().any(|known| known == host) {
            return;
        }
        if refused.len() == MAX_ASKABLE {
            refused.pop_front();
        }
        refused.push_back(host.to_owned());
    }

    /// Whether a gate of the session refused `host` as one the person may allow.
    pub(crate) fn was_refused(&self, host: &str) -> bool {
        lock(&self.refused).iter().any(|known| known == host)
    }

    /// Allow `pattern` too: the patterns allowed so far, or `None` when `max` are allowed
    /// already (a pattern allowed before is kept once).
    pub(crate) fn add(&self, pattern: Pattern, max: usize) -> Option<Vec<Pattern>> {
        let mut patterns = lock(&self.patterns);
        if !patterns.contains(&pattern) {
            if patterns.len() >= max {
                return None;
            }
            patterns.push(pattern);
        }
        Some(patterns.clone())
    }

    /// The patterns allowed so far.
    pub(crate) fn patterns(&self) -> Vec<Pattern> {
        lock(&self.patterns).clone()
    }

    /// Let `question` be asked while it is held (by a call in progress that can ask a form).
    pub(crate) fn hold(self: &Arc<Self>, question: Arc<dyn HostQuestion>) -> HeldQuestion {
        let mut live = lock(&self.live);
        live.next += 1;
        let id = live.next;
        live.questions.push(HeldEntry {
            id,
            question,
            ended: tokio_util::sync::CancellationToken::new(),
        });
        HeldQuestion {
            approved: Arc::downgrade(self),
            id,
        }
    }

    /// Whether `host` was asked about while a command waited (the person answered then, or
    /// did not in time): it is not asked again.
    fn was_asked(&self, host: &str) -> bool {
        lock(&self.asked).iter().any(|(asked, _)| asked == host)
    }

    /// Ask the person now whether the session may reach `host` (a connection waits), refused
    /// for `reason`: `Some(true)` when it is allowed now, `Some(false)` when they did not
    /// allow it, `None` when nobody can be asked now (no call holds a question, `host` is
    /// none the person may allow, [`MAX_ALLOWED_HOSTS`] are allowed or
    /// [`MAX_WAITING_QUESTIONS`] were asked already, or the call that held the question
    /// ended first).
    ///
    /// 1. The question is asked on a task of its own, so that its answer is kept even when the
    ///    connection that asked closes meanwhile.
    /// 2. It waits for its turn: one question at a time in a session.
    /// 3. A host answered meanwhile gets that answer; else the newest call in progress asks.
    /// 4. The answer is kept: the host is asked no more in the session.
    pub(crate) async fn ask_now(self: &Arc<Self>, host: &str, reason: &str) -> Option<bool> {
        if !self.may_allow(host, reason) {
            return None;
        }
        let approved = Arc::clone(self);
        let host = host.to_owned();
        tokio::spawn(async move { approved.ask_in_turn(&host).await })
            .await
            .ok()
            .flatten()
    }

    /// Steps 2 to 4 of [`Approved::ask_now`].
    async fn ask_in_turn(&self, host: &str) -> Option<bool> {
        let _turn = self.asking.lock().await;
        if let Some((_, allowed)) = lock(&self.asked).iter().find(|(asked, _)| asked == host) {
            return Some(*allowed);
        }
        if lock(&self.asked).len() >= MAX_WAITING_QUESTIONS
            || lock(&self.patterns).len() >= MAX_ALLOWED_HOSTS
        {
            return None;
        }
        let (question, ended) = {
            let live = lock(&self.live);
            let held = live.questions.last()?;
            (held.question.clone(), held.ended.clone())
        };
        let pattern = Pattern::parse(host).ok()?;
        let yes = tokio::select! {
            yes = question.allow(host) => yes,
            () = ended.cancelled() => return None,
        };
        let allowed = yes && self.add(pattern, MAX_ALLOWED_HOSTS).is_some();
        lock(&self.asked).push((host.to_owned(), allowed));
        if allowed {
            tracing::info!(
                host,
                "a session's person allowed a host while a command waited on it"
            );
        } else {
            // Declined: not a host the person may allow later in the session either.
            lock(&self.refused).retain(|known| known != host);
        }
        Some(allowed)
    }
}

/// What the proxy and the stub share.
#[derive(Debug)]
struct Shared {
    list: Arc<AllowList>,
    /// What the session's person allowed besides.
    approved: Arc<Approved>,
    resolver: Arc<Resolver>,
    refusals: Arc<Refusals>,
    owners: Arc<owner::Owners>,
}

impl Shared {
    /// The list a request is decided by now: the gate's, and what the person allowed.
    fn allowed(&self) -> Arc<AllowList> {
        let approved = self.approved.patterns();
        if approved.is_empty() {
            self.list.clone()
        } else {
            Arc::new(self.list.either(&AllowList::new(approved)))
        }
    }

    /// Record a refusal of `host` to the client at `port`, told apart off the runtime's threads
    /// (it reads `/proc`).
    async fn refuse(&self, host: String, reason: String, protocol: owner::Protocol, port: u16) {
        let owners = Arc::clone(&self.owners);
        let chain = tokio::task::spawn_blocking(move || owners.chain(protocol, port))
            .await
            .unwrap_or_default();
        let chain = chain.unwrap_or_else(|| self.refusals.last_chain(&host));
        // A connection may be allowed by the person; a lookup of the program's own never is
        // (the proxy is the only way out).
        let askable = matches!(protocol, owner::Protocol::Tcp { .. })
            && self.approved.may_allow(&host, &reason)
            && !self.approved.was_asked(&host);
        if askable {
            self.approved.note_refused(&host);
        }
        self.refusals.record_askable(host, reason, chain, askable);
    }
}

/// The runtime that serves every gate of the process: its own, so that a gate works whatever
/// runtime (or none) the embedder runs, and a busy proxy does not slow the host's calls.
fn runtime() -> std::io::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("toolhost-gate")
        .enable_all()
        .build()?;
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// The resolver every gate uses (the system's, or a test's map: see [`resolve`]).
fn resolver() -> Arc<Resolver> {
    static RESOLVER: OnceLock<Arc<Resolver>> = OnceLock::new();
    RESOLVER
        .get_or_init(|| Arc::new(Resolver::from_env()))
        .clone()
}

/// A session's gate for one profile: served while it lives.
#[derive(Debug)]
pub(crate) struct Gate {
    shared: Arc<Shared>,
    /// The proxy's port on the namespace's loopback.
    port: u16,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Gate {
    /// Serve `sockets` (from the namespaces helper: TCP listeners and UDP sockets, told apart
    /// by type) for `list` and what the person `approved`, for the session `scope` whose
    /// namespaces' holder is `holder`.
    pub(crate) fn start(
        list: Arc<AllowList>,
        approved: Arc<Approved>,
        sockets: Vec<OwnedFd>,
        scope: &str,
        holder: i32,
    ) -> std::io::Result<Gate> {
        let runtime = runtime()?;
        let shared = Arc::new(Shared {
            list,
            approved,
            resolver: resolver(),
            refusals: Arc::new(Refusals {
                scope: scope.to_owned(),
                ..Refusals::default()
            }),
            owners: Arc::new(owner::Owners::new(holder)),
        });
        let limit = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let mut port = None;
        let mut tasks = Vec::new();
        let _entered = runtime.enter();
        for socket in sockets {
            let kind = nix::sys::socket::getsockopt(&socket, nix::sys::socket::sockopt::SockType)
                .map_err(std::io::Error::from)?;
            if kind == nix::sys::socket::SockType::Stream {
                let listener = std::net::TcpListener::from(socket);
                listener.set_nonblocking(true)?;
                port.get_or_insert(listener.local_addr()?.port());
                let listener = tokio::net::TcpListener::from_std(listener)?;
                let (shared, limit) = (shared.clone(), limit.clone());
                tasks.push(
                    runtime
                        .spawn(async move {
                            loop {
                                let Ok(permit) = limit.clone().acquire_owned().await else {
                                    return;
                                };
                                let Ok((stream, _)) = listener.accept().await else {
                                    continue;
                                };
                                let shared = shared.clone();
                                tokio::spawn(async move {
                                    proxy::serve(stream, shared).await;
                                    drop(permit);
                                });
                            }
                        })
                        .abort_handle(),
                );
            } else {
                let socket = std::net::UdpSocket::from(socket);
                socket.set_nonblocking(true)?;
                let socket = tokio::net::UdpSocket::from_std(socket)?;
                tasks.push(
                    runtime
                        .spawn(dns::serve(socket, shared.clone()))
                        .abort_handle(),
                );
            }
        }
        let port = port.ok_or_else(|| std::io::Error::other("the gate got no listener"))?;
        Ok(Gate {
            shared,
            port,
            tasks,
        })
    }

    /// The list it allows, with what the session's person allowed.
    pub(crate) fn list(&self) -> Arc<AllowList> {
        self.shared.allowed()
    }

    /// What it refused.
    pub(crate) fn refusals(&self) -> Arc<Refusals> {
        self.shared.refusals.clone()
    }

    /// The variables that send a command's connections through the proxy: both cases of the
    /// usual proxy variables, `NO_PROXY` for the namespace's own loopback, Node's switch to
    /// honour them, and the JVM's proxy properties.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let port = self.port;
        let url = format!("http://127.0.0.1:{port}");
        let local = "localhost,127.0.0.1,::1";
        let mut env = Vec::new();
        for name in ["http_proxy", "https_proxy", "all_proxy"] {
            env.push((name.to_owned(), url.clone()));
            env.push((name.to_ascii_uppercase(), url.clone()));
        }
        env.push(("no_proxy".to_owned(), local.to_owned()));
        env.push(("NO_PROXY".to_owned(), local.to_owned()));
        env.push(("NODE_USE_ENV_PROXY".to_owned(), "1".to_owned()));
        env.push((
            "JAVA_TOOL_OPTIONS".to_owned(),
            format!(
                "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort={port} -Dhttps.proxyHost=127.0.0.1 \
                 -Dhttps.proxyPort={port} -Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]"
            ),
        ));
        env
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What the gate refused a command that started at `since_ms` under `list`, with the keeper
/// `keeper`: the hosts refused to it since, and what it may reach; `None` when nothing was
/// refused. Its note names the first [`MAX_NAMED`] hosts and counts the others.
pub(crate) fn refusal(
    refusals: &Refusals,
    list: &AllowList,
    since_ms: u64,
    keeper: Option<i32>,
) -> Option<diagnose::Refusal> {
    let refused = refusals.since(since_ms, keeper);
    if refused.is_empty() {
        return None;
    }
    Some(diagnose::Refusal::Network {
        refused: refused
            .into_iter()
            .map(|refusal| diagnose::RefusedHost {
                host: refusal.host,
                reason: refusal.reason,
                askable: refusal.askable,
            })
            .collect(),
        allowed: list.for_people(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A person who answers every host question with `allow`, and counts the questions.
    struct Answering {
        allow: bool,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl HostQuestion for Answering {
        fn allow<'a>(&'a self, _host: &'a str) -> BoxFuture<'a, bool> {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(std::future::ready(self.allow))
        }
    }

    fn answering(allow: bool) -> Arc<Answering> {
        Arc::new(Answering {
            allow,
            asked: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A connection to a host the person may allow waits for their answer while a call holds
    /// a question: allowed, the session reaches it; each host is asked once; declined, it is
    /// not askable after the command either; with no question held, nobody is asked.
    #[tokio::test]
    async fn a_held_question_allows_a_host_while_its_connection_waits() {
        let approved = Arc::new(Approved::new(Some(Askable::Any)));
        assert_eq!(approved.ask_now("a.test:443", NOT_LISTED).await, None);

        let yes = answering(true);
        let held = approved.hold(yes.clone());
        assert_eq!(approved.ask_now("a.test:443", NOT_LISTED).await, Some(true));
        assert_eq!(approved.ask_now("a.test:443", NOT_LISTED).await, Some(true));
        assert_eq!(yes.asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(
            approved.patterns(),
            vec![Pattern::parse("a.test:443").expect("pattern")]
        );
        // Refused for another reason, or an address: never asked.
        assert_eq!(
            approved
                .ask_now("b.test:443", "an address that is not public")
                .await,
            None
        );
        assert_eq!(approved.ask_now("10.0.0.1:443", NOT_LISTED).await, None);
        drop(held);
        assert_eq!(approved.ask_now("c.test:443", NOT_LISTED).await, None);

        let no = answering(false);
        let _held = approved.hold(no.clone());
        assert_eq!(
            approved.ask_now("c.test:443", NOT_LISTED).await,
            Some(false)
        );
        assert!(approved.was_asked("c.test:443"));
        assert_eq!(approved.patterns().len(), 1);
    }

    /// A person who never answers.
    struct Silent;

    impl HostQuestion for Silent {
        fn allow<'a>(&'a self, _host: &'a str) -> BoxFuture<'a, bool> {
            Box::pin(std::future::pending())
        }
    }

    /// The call that held a question ends while it is pending: the connection is refused at
    /// once, and the host stays askable after the command.
    #[tokio::test]
    async fn a_question_pending_when_its_call_ends_is_dropped() {
        let approved = Arc::new(Approved::new(Some(Askable::Any)));
        let held = approved.hold(Arc::new(Silent));
        let asking = {
            let approved = Arc::clone(&approved);
            tokio::spawn(async move { approved.ask_now("d.test:443", NOT_LISTED).await })
        };
        // The question is pending once the turn is taken.
        while approved.asking.try_lock().is_ok() {
            tokio::task::yield_now().await;
        }
        drop(held);
        assert_eq!(asking.await.expect("joined"), None);
        assert!(!approved.was_asked("d.test:443"));
    }

    /// The note of [`refusal`].
    fn note(
        refusals: &Refusals,
        list: &AllowList,
        since_ms: u64,
        keeper: Option<i32>,
    ) -> Option<String> {
        refusal(refusals, list, since_ms, keeper).map(|refusal| refusal.note())
    }

    #[test]
    fn a_note_names_each_refused_host_once_and_only_those_since_the_start() {
        let refusals = Refusals::default();
        refusals.record(
            "old.test:443".to_owned(),
            "not in the allow-list".to_owned(),
            Vec::new(),
        );
        let start = unix_ms() + 1;
        while unix_ms() < start {
            std::thread::yield_now();
        }
        let list = AllowList::parse("allowed.test").expect("list");
        assert_eq!(note(&refusals, &list, start, None), None);
        for _ in 0..3 {
            refusals.record(
                "denied.test:443".to_owned(),
                "not in the allow-list".to_owned(),
                Vec::new(),
            );
        }
        refusals.record(
            "denied.test".to_owned(),
            "looked up directly".to_owned(),
            Vec::new(),
        );
        let note = note(&refusals, &list, start, None).expect("a note");
        assert_eq!(note.matches("denied.test:443").count(), 1, "{note}");
        assert!(note.contains("denied.test (looked up directly)"), "{note}");
        assert!(!note.contains("old.test"), "{note}");
        assert!(note.contains("limited to allowed.test,"), "{note}");
    }

    #[test]
    fn a_command_is_told_only_its_own_refusals_and_those_of_no_known_process() {
        let refusals = Refusals::default();
        let record = |host: &str, chain: Vec<i32>| {
            refusals.record(host.to_owned(), "no".to_owned(), chain);
        };
        record("mine.test:1", vec![40, 30, 20]);
        record("theirs.test:1", vec![41, 31, 21]);
        record("unknown.test:1", Vec::new());
        let hosts = |keeper: Option<i32>| -> Vec<String> {
            refusals
                .since(0, keeper)
                .into_iter()
                .map(|refusal| refusal.host)
                .collect()
        };
        assert_eq!(hosts(Some(30)), ["mine.test:1", "unknown.test:1"]);
        assert_eq!(hosts(Some(31)), ["theirs.test:1", "unknown.test:1"]);
        assert_eq!(hosts(None), ["unknown.test:1"]);
    }

    #[test]
    fn a_note_is_bounded() {
        let refusals = Refusals::default();
        for index in 0..(MAX_REFUSALS + 50) {
            refusals.record(format!("host{index}.test:1"), "no".to_owned(), Vec::new());
        }
        assert_eq!(lock(&refusals.entries).len(), MAX_REFUSALS);
        let list = AllowList::parse("a.test").expect("list");
        let note = note(&refusals, &list, 0, None).expect("a note");
        assert_eq!(note.matches(".test:1").count(), MAX_NAMED, "{note}");
        assert!(note.contains(&format!("and {} more", MAX_REFUSALS - MAX_NAMED)));
    }
}
