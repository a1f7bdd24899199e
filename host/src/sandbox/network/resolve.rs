//! Where an allowed host may be reached: names resolved once by the host, and every address
//! checked before the proxy connects to it (a name that resolves to an address of the
//! machine's own or of a private network is refused, so that an allowed name cannot be
//! pointed at the host's services; the proxy connects to the address it checked, so a second
//! lookup cannot change it).
//!
//! For tests only, `TOOLHOST_TEST_RESOLVE` replaces the system's resolver with a map
//! (`name=ADDRESS[,ADDRESS]...;name=...`): every name outside it is unknown, so no test name
//! ever reaches a real resolver. `TOOLHOST_TEST_PUBLIC` (`ADDRESS,...`) counts the addresses
//! it lists as public, so that a test may use loopback servers. Only a debug build (the dev
//! profile, which the tests use) reads them: a release build, the one that ships, ignores them
//! and says so.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::allow::{AllowList, Host};

/// The variable holding the test-only resolver map.
pub const TEST_RESOLVE: &str = "TOOLHOST_TEST_RESOLVE";
/// The variable holding the addresses a test counts as public.
pub const TEST_PUBLIC: &str = "TOOLHOST_TEST_PUBLIC";

/// Why an address is not public: `None` for a public one.
pub fn non_public(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return non_public_v4(v4);
            }
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("a loopback address (the machine's own)")
            } else if v6.is_unspecified() {
                Some("an unspecified address")
            } else if first & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if first & 0xfe00 == 0xfc00 {
                Some("a private network's address (unique local)")
            } else if first & 0xff00 == 0xff00 {
                Some("a multicast address")
            } else if v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                // NAT64: the IPv4 address in its last 32 bits decides.
                let [.., a, b, c, d] = v6.octets();
                non_public_v4(Ipv4Addr::new(a, b, c, d))
            } else {
                None
            }
        }
    }
}

fn non_public_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = v4.octets();
    if v4.is_loopback() {
        Some("a loopback address (the machine's own)")
    } else if v4.is_private() {
        Some("a private network's address")
    } else if v4.is_link_local() {
        Some("a link-local address (where cloud metadata services answer)")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a shared carrier network's address (where some cloud metadata services answer)")
    } else if a == 0 || v4.is_unspecified() {
        Some("an unspecified address")
    } else if v4.is_broadcast() || a >= 224 {
        Some("a multicast or reserved address")
    } else if a == 192 && b == 0 && v4.octets()[2] == 0 {
        Some("an address reserved for protocols")
    } else {
        None
    }
}

/// How names are resolved and which addresses count as public.
#[derive(Debug, Default)]
pub struct Resolver {
    /// The test-only map; `None`: the system's resolver.
    test: Option<HashMap<String, Vec<IpAddr>>>,
    /// Addresses a test counts as public.
    public: Vec<IpAddr>,
}

/// Why a connection was refused, or could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The policy refused it: the model should not retry.
    Policy(String),
    /// The host could not resolve or reach it.
    Failed(String),
}

impl Resolver {
    /// The system's resolver, or, in a debug build, the test-only map of [`TEST_RESOLVE`] when
    /// that is set.
    pub fn from_env() -> Resolver {
        let mut resolver = Resolver::default();
        if !cfg!(debug_assertions) {
            if std::env::var_os(TEST_RESOLVE).is_some() || std::env::var_os(TEST_PUBLIC).is_some() {
                tracing::warn!(
                    "{TEST_RESOLVE} and {TEST_PUBLIC} are ignored: only a debug build of toolhost \
                     reads them (for its tests)"
                );
            }
            return resolver;
        }
        if let Ok(map) = std::env::var(TEST_RESOLVE) {
            let mut names = HashMap::new();
            for entry in map.split(';').filter(|entry| !entry.trim().is_empty()) {
                let Some((name, addresses)) = entry.split_once('=') else {
                    continue;
                };
                let Some(name) = super::allow::normalize(name.trim()) else {
                    continue;
                };
                let addresses: Vec<IpAddr> = addresses
                    .split(',')
                    .filter_map(|address| address.trim().parse().ok())
                    .collect();
                names.insert(name, addresses);
            }
            tracing::warn!(
                names = names.len(),
                "{TEST_RESOLVE} is set: the network proxy resolves names from it alone (for tests)"
            );
            resolver.test = Some(names);
        }
        if let Ok(public) = std::env::var(TEST_PUBLIC) {
            resolver.public = public
                .split(',')
                .filter_map(|address| address.trim().parse().ok())
                .collect();
        }
        resolver
    }

    /// Why `address` may not be reached by an allowed name: `None` when it is public.
    fn non_public(&self, address: IpAddr) -> Option<&'static str> {
        if self.public.contains(&address) {
            return None;
        }
        non_public(address)
    }

    /// The addresses of `name` (the test map's, or the system's).
    async fn lookup(&self, name: &str, port: u16) -> Result<Vec<IpAddr>, String> {
        if let Some(map) = &self.test {
            return map
                .get(name)
                .cloned()
                .ok_or_else(|| format!("{name} is unknown to the resolver"));
        }
        let found = tokio::net::lookup_host((name, port))
            .await
            .map_err(|error| format!("{name} could not be resolved: {error}"))?;
        Ok(found.map(|address| address.ip()).collect())
    }

    /// Where the proxy may connect for `host` at `port` under `list`: every address it may use,
    /// in the resolver's order. An address asked for directly must be listed; a name must be
    /// listed, and only its public addresses are used (or one the list names).
    pub async fn destinations(
        &self,
        list: &AllowList,
        host: &Host,
        port: u16,
    ) -> Result<Vec<SocketAddr>, Refused> {
        match host {
            Host::Address(address) => {
                if list.lists_address(*address, port) {
                    Ok(vec![SocketAddr::new(*address, port)])
                } else {
                    Err(Refused::Policy(
                        "not in the allow-list (an address is reached only when the list names it)"
                            .to_owned(),
                    ))
                }
            }
            Host::Name(name) => {
                if !list.allows(host, port) {
                    return Err(Refused::Policy("not in the allow-list".to_owned()));
                }
                let addresses = self.lookup(name, port).await.map_err(Refused::Failed)?;
                let mut why = None;
                let usable: Vec<SocketAddr> = addresses
                    .iter()
                    .filter(|address| match self.non_public(**address) {
                        Some(_) if list.lists_address(**address, port) => true,
                        Some(class) => {
                            why.get_or_insert((**address, class));
                            false
                        }
                        None => true,
                    })
                    .map(|address| SocketAddr::new(*address, port))
                    .collect();
                match (usable.is_empty(), why) {
                    (false, _) => Ok(usable),
                    (true, Some((address, class))) => Err(Refused::Policy(format!(
                        "it resolves to {address}, {class}; only an address named in the \
                         allow-list may be reached there"
                    ))),
                    (true, None) => Err(Refused::Failed(format!("{name} has no address"))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(map: &[(&str, &[&str])], public: &[&str]) -> Resolver {
        Resolver {
            test: Some(
                map.iter()
                    .map(|(name, addresses)| {
                        (
                            (*name).to_owned(),
                            addresses.iter().map(|a| a.parse().expect("ip")).collect(),
                        )
                    })
                    .collect(),
            ),
            public: public.iter().map(|a| a.parse().expect("ip")).collect(),
        }
    }

    #[test]
    fn addresses_of_the_machine_private_networks_and_metadata_services_are_not_public() {
        for address in [
            "127.0.0.1",
            "127.0.0.2",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            let ip: IpAddr = address.parse().expect("ip");
            assert!(non_public(ip).is_some(), "{address} counted as public");
        }
        for address in [
            "1.1.1.1",
            "93.184.216.34",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            let ip: IpAddr = address.parse().expect("ip");
            assert_eq!(non_public(ip), None, "{address}");
        }
    }

    #[tokio::test]
    async fn a_listed_name_is_reached_only_at_its_public_addresses() {
        let resolver = resolver(
            &[
                ("allowed.test", &["127.0.0.1"]),
                ("inside.test", &["127.0.0.2"]),
                ("mixed.test", &["127.0.0.2", "127.0.0.1"]),
            ],
            &["127.0.0.1"],
        );
        let list = AllowList::parse("allowed.test,inside.test,mixed.test,127.0.0.3:99").expect("l");
        let name = |n: &str| Host::parse(n).expect("host");
        assert_eq!(
            resolver
                .destinations(&list, &name("allowed.test"), 443)
                .await,
            Ok(vec!["127.0.0.1:443".parse().expect("addr")])
        );
        assert_eq!(
            resolver.destinations(&list, &name("mixed.test"), 1).await,
            Ok(vec!["127.0.0.1:1".parse().expect("addr")])
        );
        let Err(Refused::Policy(why)) = resolver.destinations(&list, &name("inside.test"), 1).await
        else {
            panic!("an unmarked loopback address was allowed");
        };
        assert!(
            why.contains("127.0.0.2") && why.contains("loopback"),
            "{why}"
        );
        assert!(matches!(
            resolver.destinations(&list, &name("denied.test"), 1).await,
            Err(Refused::Policy(_))
        ));
        assert!(matches!(
            resolver.destinations(&list, &name("127.0.0.1"), 443).await,
            Err(Refused::Policy(_))
        ));
        assert_eq!(
            resolver.destinations(&list, &name("127.0.0.3"), 99).await,
            Ok(vec!["127.0.0.3:99".parse().expect("addr")])
        );
        // Listed, but unknown to the map: never asked of the system's resolver.
        let list = AllowList::parse("unknown.test").expect("l");
        assert!(matches!(
            resolver.destinations(&list, &name("unknown.test"), 1).await,
            Err(Refused::Failed(_))
        ));
    }
}
