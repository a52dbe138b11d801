//! The IP family a client connects over and a server listens on: either (the default),
//! or IPv4 or IPv6 alone (`-4`, `-6`, as iperf3's).

use crate::options::{Iperf3, Mesh, Takes, TestOption};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `-4` and `-6`, each declared once (see [`crate::options`]): the command line and
/// `fperf mesh` take them from here. A probe's family=4|6 names a family, not a flag.
pub static OPTIONS: [TestOption<IpFamily>; 2] = [
    TestOption {
        id: "ipv4",
        long: "ipv4",
        short: Some('4'),
        alias: Some("version4"),
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &["ipv6"],
        help: "IPv4 only, as iperf3's -4: the client takes HOST's IPv4 address; the server \
               listens on IPv4 alone.",
        mesh: Mesh::Help(
            "IPv4 only: the coordinator reaches each server at its name's IPv4 address and \
             sends every test to the receiving host's IPv4 address.",
        ),
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |family, _| {
            *family = IpFamily::V4;
            Ok(())
        },
    },
    TestOption {
        id: "ipv6",
        long: "ipv6",
        short: Some('6'),
        alias: Some("version6"),
        takes: Takes::Nothing,
        choices: &[],
        conflicts: &[],
        help: "IPv6 only, as iperf3's -6: the client takes HOST's IPv6 address; the server \
               listens on IPv6 alone; --loopback runs over ::1.",
        mesh: Mesh::Help(
            "IPv6 only: the coordinator reaches each server at its name's IPv6 address and \
             sends every test to the receiving host's IPv6 address.",
        ),
        probe: None,
        iperf3: Iperf3::No,
        what: "a flag",
        set: |family, _| {
            *family = IpFamily::V6;
            Ok(())
        },
    },
];

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IpFamily {
    /// IPv6 and IPv4: the client takes the name's first address, the server listens on
    /// both.
    #[default]
    Any,
    V4,
    V6,
}

impl IpFamily {
    /// Whether `ip` is of this family.
    pub fn admits(self, ip: IpAddr) -> bool {
        match self {
            IpFamily::Any => true,
            IpFamily::V4 => ip.is_ipv4(),
            IpFamily::V6 => ip.is_ipv6(),
        }
    }

    /// The flag that asks for it, and the family's name.
    pub fn flag(self) -> Option<(&'static str, &'static str)> {
        match self {
            IpFamily::Any => None,
            IpFamily::V4 => Some(("-4", "IPv4")),
            IpFamily::V6 => Some(("-6", "IPv6")),
        }
    }

    /// This host's loopback address: `::1` for IPv6 alone, else 127.0.0.1.
    pub fn loopback(self) -> IpAddr {
        match self {
            IpFamily::V6 => Ipv6Addr::LOCALHOST.into(),
            _ => Ipv4Addr::LOCALHOST.into(),
        }
    }

    /// An error if `ip` is not of this family, naming `what` gave it.
    pub fn check(self, what: &str, ip: IpAddr) -> Result<(), String> {
        match self.flag() {
            Some((flag, name)) if !self.admits(ip) => Err(format!(
                "{flag} asks for {name} alone, and {what} {ip} is an {} address",
                if ip.is_ipv4() { "IPv4" } else { "IPv6" }
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_admits_its_own_addresses_and_names_the_others() {
        let (v4, v6): (IpAddr, IpAddr) = (Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into());
        assert!(IpFamily::Any.admits(v4) && IpFamily::Any.admits(v6));
        assert!(IpFamily::V4.admits(v4) && !IpFamily::V4.admits(v6));
        assert!(IpFamily::V6.admits(v6) && !IpFamily::V6.admits(v4));
        assert_eq!(IpFamily::V6.loopback(), v6);
        assert_eq!(IpFamily::Any.loopback(), v4);
        assert_eq!(
            IpFamily::V6.check("-B", v4),
            Err("-6 asks for IPv6 alone, and -B 127.0.0.1 is an IPv4 address".into())
        );
        assert_eq!(IpFamily::V4.check("-B", v4), Ok(()));
        assert_eq!(IpFamily::Any.check("-B", v6), Ok(()));
    }
}
