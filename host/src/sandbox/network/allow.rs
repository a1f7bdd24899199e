//! The operator's allow-list: which hosts a command under `--network allow=...` may reach
//! through the session's proxy.
//!
//! A pattern is `HOST` or `HOST:PORT`. `HOST` is a name (`example.com`), a wildcard for every
//! name below one (`*.example.com`, not `example.com` itself), an IPv4 address or an IPv6
//! address in brackets (`[2001:db8::1]`). Without a port every port is allowed. Names are
//! compared without case and without a final dot.
//!
//! Lists are interned: a [`Network::Allow`](super::super::Network::Allow) carries an
//! [`AllowListId`], so that a profile stays a small value that can be copied and compared.

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Why an allow-list pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{pattern}` is not a host pattern ({why}); write `example.com`, `*.example.com`, `127.0.0.1` or `[::1]`, with an optional `:PORT`"
)]
pub struct PatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// What a pattern's host part matches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum HostPattern {
    /// Exactly this name (lower case, no final dot).
    Name(String),
    /// Every name ending in `.SUFFIX` (the suffix without its leading dot).
    Below(String),
    /// Exactly this address.
    Address(IpAddr),
}

/// One entry of an allow-list.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pattern {
    host: HostPattern,
    /// `None`: every port.
    port: Option<u16>,
}

impl Pattern {
    /// Parse one pattern.
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        let error = |why| PatternError {
            pattern: text.to_owned(),
            why,
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(error("it is empty"));
        }
        // `[v6]`, `[v6]:port`, `host`, `host:port`.
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (address, after) = rest.split_once(']').ok_or_else(|| error("no `]`"))?;
            let port = match after {
                "" => None,
                _ => Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| error("text after `]`"))?,
                ),
            };
            let address: std::net::Ipv6Addr =
                address.parse().map_err(|_| error("not an IPv6 address"))?;
            (HostPattern::Address(IpAddr::V6(address)), port)
        } else {
            let (host, port) = match text.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            };
            if host.contains(':') {
                return Err(error("an IPv6 address needs brackets"));
            }
            (parse_host(host).map_err(error)?, port)
        };
        let port = port
            .map(|port| {
                port.parse::<u16>()
                    .ok()
                    .filter(|port| *port > 0)
                    .ok_or_else(|| error("not a port from 1 to 65535"))
            })
            .transpose()?;
        Ok(Pattern { host, port })
    }

    /// Whether this pattern allows `host` (a normalized name, see [`normalize`], or an
    /// address) at `port`.
    pub fn allows(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|allowed| allowed != port) {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Name(name), Host::Name(asked)) => name == asked,
            (HostPattern::Below(suffix), Host::Name(asked)) => asked
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::Address(address), Host::Address(asked)) => address == asked,
            _ => false,
        }
    }

    /// Whether it names one host by name, at one port (`example.com:443`): no wildcard, no
    /// address, no "every port".
    pub fn is_named_port(&self) -> bool {
        matches!(self.host, HostPattern::Name(_)) && self.port.is_some()
    }

    /// Whether every host and port this pattern allows, `other` allows too.
    pub fn within(&self, other: &Pattern) -> bool {
        if other.port.is_some() && other.port != self.port {
            return false;
        }
        match (&self.host, &other.host) {
            // The ports agree (checked above): any port stands for them.
            (HostPattern::Name(name), _) => {
                other.allows(&Host::Name(name.clone()), self.port.unwrap_or(1))
            }
            (HostPattern::Below(mine), HostPattern::Below(theirs)) => {
                mine == theirs
                    || mine
                        .strip_suffix(theirs.as_str())
                        .is_some_and(|head| head.ends_with('.'))
            }
            (HostPattern::Address(mine), HostPattern::Address(theirs)) => mine == theirs,
            _ => false,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(name) => f.write_str(name)?,
            HostPattern::Below(suffix) => write!(f, "*.{suffix}")?,
            HostPattern::Address(IpAddr::V4(address)) => write!(f, "{address}")?,
            HostPattern::Address(IpAddr::V6(address)) => write!(f, "[{address}]")?,
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// The host part of a pattern.
fn parse_host(host: &str) -> Result<HostPattern, &'static str> {
    if let Ok(address) = host.parse::<std::net::Ipv4Addr>() {
        return Ok(HostPattern::Address(IpAddr::V4(address)));
    }
    let (below, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    let name = normalize(name).ok_or("not a host name")?;
    if name.contains('*') {
        return Err("`*` only as the first label, `*.example.com`");
    }
    Ok(if below {
        HostPattern::Below(name)
    } else {
        HostPattern::Name(name)
    })
}

/// A host a command asked for: a name or an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A name, normalized ([`normalize`]).
    Name(String),
    /// An address.
    Address(IpAddr),
}

impl Host {
    /// A host from a request (`example.com`, `127.0.0.1`, `[::1]` or `::1`); `None` when it
    /// is neither a name nor an address.
    pub fn parse(text: &str) -> Option<Host> {
        let bare = text
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(address) = bare.parse::<IpAddr>() {
            return Some(Host::Address(address));
        }
        normalize(text).map(Host::Name)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Address(IpAddr::V4(address)) => write!(f, "{address}"),
            Host::Address(IpAddr::V6(address)) => write!(f, "[{address}]"),
        }
    }
}

/// `name` in lower case without a final dot, when it is a host name: labels of letters,
/// digits, `-` and `_`, 1 to 63 bytes each, 253 bytes in all.
pub fn normalize(name: &str) -> Option<String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    valid.then_some(name)
}

/// The hosts a session's person may allow beyond the allow-list when asked (the operator's
/// `--network ask[=PATTERNS]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Askable {
    /// Any host.
    Any,
    /// Only hosts within these patterns.
    Within(AllowList),
}

impl Askable {
    /// Whether `pattern` may be allowed: every host and port it allows lies within these.
    pub fn allows(&self, pattern: &Pattern) -> bool {
        match self {
            Askable::Any => true,
            Askable::Within(list) => list.patterns().iter().any(|bound| pattern.within(bound)),
        }
    }
}

impl fmt::Display for Askable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Askable::Any => f.write_str("any host"),
            Askable::Within(list) => write!(f, "{list}"),
        }
    }
}

/// An allow-list: its patterns, sorted and without duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowList {
    patterns: Vec<Pattern>,
}

impl AllowList {
    /// Parse a comma-separated list of patterns (at least one).
    pub fn parse(text: &str) -> Result<AllowList, PatternError> {
        let patterns = text
            .split(',')
            .map(Pattern::parse)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AllowList::new(patterns))
    }

    /// A list of `patterns`.
    pub fn new(mut patterns: Vec<Pattern>) -> AllowList {
        patterns.sort();
        patterns.dedup();
        AllowList { patterns }
    }

    /// Its patterns.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Its patterns for people: `a.com, *.b.org:443` (`Display` writes the setting, without
    /// spaces).
    pub fn for_people(&self) -> String {
        if self.patterns.is_empty() {
            return "no host".to_owned();
        }
        let words: Vec<String> = self.patterns.iter().map(ToString::to_string).collect();
        words.join(", ")
    }

    /// Whether some pattern allows `host` at `port`.
    pub fn allows(&self, host: &Host, port: u16) -> bool {
        self.patterns
            .iter()
            .any(|pattern| pattern.allows(host, port))
    }

    /// Whether `host` is allowed as an address (a pattern names that address), which lets a
    /// command reach it whatever its class (loopback, private).
    pub fn lists_address(&self, address: IpAddr, port: u16) -> bool {
        self.allows(&Host::Address(address), port)
    }

    /// Both lists together: what both allow. A pattern of one is kept when the other allows
    /// all it allows; the result may allow less than the exact intersection (never more).
    pub fn both(&self, other: &AllowList) -> AllowList {
        let kept = |mine: &AllowList, theirs: &AllowList| -> Vec<Pattern> {
            mine.patterns
                .iter()
                .filter(|pattern| theirs.patterns.iter().any(|other| pattern.within(other)))
                .cloned()
                .collect()
        };
        let mut patterns = kept(self, other);
        patterns.extend(kept(other, self));
        AllowList::new(patterns)
    }

    /// Both lists' patterns: what either allows.
    pub fn either(&self, other: &AllowList) -> AllowList {
        AllowList::new(
            self.patterns
                .iter()
                .chain(&other.patterns)
                .cloned()
                .collect(),
        )
    }
}

impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.patterns.is_empty() {
            return f.write_str("no host");
        }
        for (index, pattern) in self.patterns.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{pattern}")?;
        }
        Ok(())
    }
}

/// An interned [`AllowList`]: the same list always has the same id in one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AllowListId(u32);

/// Every list interned in this process. Lists come from the operator's flags, plugins'
/// manifests and policies' requests (which [`AllowListId::try_of`] bounds).
static LISTS: Mutex<Vec<Arc<AllowList>>> = Mutex::new(Vec::new());

/// Most lists [`AllowListId::try_of`] interns in one process: each distinct list stays, so
/// policies' requests cannot grow the table without bound.
pub const MAX_LISTS: usize = 1024;

/// Most lists the requests of one owner (a plugin) may add to the table, so that one cannot
/// use up what the others may ask for.
pub const MAX_LISTS_PER_OWNER: usize = 64;

/// How many lists each owner's requests added.
static OWNERS: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

impl AllowListId {
    /// The id of `list`, interned on first use.
    pub fn of(list: AllowList) -> AllowListId {
        Self::intern(list, None).unwrap_or(AllowListId(u32::MAX))
    }

    /// The id of `list` for a request of `owner`: a list interned already, or a new one unless
    /// [`MAX_LISTS`] lists are, or `owner` added [`MAX_LISTS_PER_OWNER`] already (`None`).
    pub fn try_of(list: AllowList, owner: &str) -> Option<AllowListId> {
        Self::intern(list, Some(owner))
    }

    /// The id of `list`, interned on first use; a new list of a request's `owner` only within
    /// the bounds of [`AllowListId::try_of`]. One lock held throughout (the table's, then the
    /// owners'), so a list is charged to its owner once.
    fn intern(list: AllowList, owner: Option<&str>) -> Option<AllowListId> {
        let mut lists = crate::lock(&LISTS);
        let index = match lists.iter().position(|known| **known == list) {
            Some(index) => index,
            None => {
                if let Some(owner) = owner {
                    let mut owners = crate::lock(&OWNERS);
                    let position = match owners.iter().position(|(name, _)| name == owner) {
                        Some(position) => position,
                        None => {
                            owners.push((owner.to_owned(), 0));
                            owners.len() - 1
                        }
                    };
                    let added = &mut owners[position].1;
                    if *added >= MAX_LISTS_PER_OWNER || lists.len() >= MAX_LISTS {
                        return None;
                    }
                    *added += 1;
                }
                lists.push(Arc::new(list));
                lists.len() - 1
            }
        };
        Some(AllowListId(u32::try_from(index).unwrap_or(u32::MAX)))
    }

    /// The list.
    pub fn list(self) -> Arc<AllowList> {
        let lists = crate::lock(&LISTS);
        usize::try_from(self.0)
            .ok()
            .and_then(|index| lists.get(index).cloned())
            // Ids are only made by `of`: a missing one allows nothing.
            .unwrap_or_else(|| Arc::new(AllowList::new(Vec::new())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> Host {
        Host::parse(text).expect("host")
    }

    #[test]
    fn names_wildcards_addresses_and_ports_match_as_written() {
        let list =
            AllowList::parse("Example.COM., *.pypi.org:443, 127.0.0.1:8080, [::1]").expect("list");
        assert_eq!(
            list.to_string(),
            "example.com,*.pypi.org:443,127.0.0.1:8080,[::1]"
        );
        assert!(list.allows(&host("example.com"), 1234));
        assert!(list.allows(&host("EXAMPLE.com."), 80));
        assert!(
            !list.allows(&host("www.example.com"), 80),
            "a name is not its subdomains"
        );
        assert!(list.allows(&host("files.pypi.org"), 443));
        assert!(list.allows(&host("a.b.pypi.org"), 443));
        assert!(
            !list.allows(&host("pypi.org"), 443),
            "a wildcard is not its apex"
        );
        assert!(!list.allows(&host("evilpypi.org"), 443));
        assert!(
            !list.allows(&host("files.pypi.org"), 80),
            "the port is part of the pattern"
        );
        assert!(list.allows(&host("127.0.0.1"), 8080));
        assert!(!list.allows(&host("127.0.0.1"), 8081));
        assert!(list.allows(&host("[::1]"), 5));
        assert!(list.allows(&host("::1"), 5));
        assert!(
            !list.allows(&host("localhost"), 8080),
            "a name is not its address"
        );
    }

    #[test]
    fn malformed_patterns_are_refused_with_the_reason() {
        for bad in [
            "",
            "*",
            "*.",
            "a..b",
            "exa mple.com",
            "a.com:0",
            "a.com:70000",
            "a.com:x",
            "::1",
            "[::1",
            "[x]",
            "a.*.com",
            "*.*.com",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?} parsed");
        }
        let error = AllowList::parse("ok.com,bad host").expect_err("refused");
        assert_eq!(error.pattern, "bad host");
    }

    #[test]
    fn both_lists_allow_only_what_each_allows() {
        let operator = AllowList::parse("*.example.com,pypi.org,github.com:443").expect("a");
        let grant = AllowList::parse("api.example.com,pypi.org:443,npmjs.org").expect("b");
        let both = operator.both(&grant);
        assert_eq!(both.to_string(), "api.example.com,pypi.org:443");
        assert!(both.allows(&host("api.example.com"), 1));
        assert!(!both.allows(&host("www.example.com"), 443));
        assert!(!both.allows(&host("pypi.org"), 80));
        assert!(!both.allows(&host("npmjs.org"), 443));
        assert!(!both.allows(&host("github.com"), 443));
        let wide = AllowList::parse("*.example.com").expect("c");
        let narrow = AllowList::parse("*.api.example.com").expect("d");
        assert_eq!(wide.both(&narrow), narrow);
        assert_eq!(wide.either(&narrow).patterns().len(), 2);
    }

    #[test]
    fn the_same_list_is_interned_once() {
        let a = AllowListId::of(AllowList::parse("a.test,b.test").expect("a"));
        let b = AllowListId::of(AllowList::parse("b.test, A.TEST").expect("b"));
        let c = AllowListId::of(AllowList::parse("c.test").expect("c"));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.list().to_string(), "a.test,b.test");
    }
}
