//! The IPsec flavour of a `vpn` path: strongSwan's IKEv2 daemon (charon) between the two gateway
//! instances, configured by one swanctl file per end, authenticated with a pre-shared key made
//! for the tunnel when `up` launches the pair.
//!
//! The tunnel is policy-based: each end's traffic selectors are its own subnet and the far one,
//! so the VPC routes that send the far subnet to the gateway's interface are all the routing it
//! needs (charon installs the policies, and on a host with kernel IPsec, xfrm encrypts what the
//! gateway forwards). The gateways see each other behind AWS's 1:1 NAT of public addresses,
//! so IKE moves to UDP 4500 and ESP travels inside it; identities are the hosts' plan keys, not
//! addresses, for the same reason. Not for writing the boot script around the file: that is
//! [`crate::userdata::ipsec_gateway`].

use std::fmt;
use std::net::Ipv4Addr;

use aws_smithy_types::base64;

use crate::error::Error;
use crate::plan::VpnEnd;

/// IKE's algorithms: AES-GCM and the ECP-256 group, from strongSwan's openssl plugin (built
/// into Fedora-family packages; Debian's libstrongswan-standard-plugins). One proposal only:
/// a fallback for builds without the plugin does not work, since the initiator's first key
/// exchange takes the first proposal's group and fails on an unsupported one, and a responder
/// selects an AES-GCM proposal it then cannot run.
pub const IKE_PROPOSALS: &str = "aes256gcm16-prfsha256-ecp256";

/// ESP's algorithms (a fresh ECP-256 exchange at each rekeying).
pub const ESP_PROPOSALS: &str = "aes256gcm16-ecp256";

/// Bytes of randomness in a tunnel's pre-shared key.
const PSK_BYTES: usize = 32;

/// The pre-shared key of one IPsec tunnel, as swanctl writes binary secrets (`0s` + base64).
/// Like WireGuard's private keys it exists only in the two gateways' user data and on the
/// gateways (in a mode 0600 file); `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct IpsecPsk(String);

impl fmt::Debug for IpsecPsk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IpsecPsk(..)")
    }
}

impl IpsecPsk {
    /// 32 random bytes from the operating system.
    pub fn generate() -> Result<Self, Error> {
        let mut bytes = [0u8; PSK_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
        Ok(IpsecPsk(base64::encode(bytes)))
    }

    /// The key in swanctl's notation: `0s<base64>` (only base64 characters: shell- and
    /// config-safe).
    pub fn swanctl_secret(&self) -> String {
        format!("0s{}", self.0)
    }

    /// A key [`IpsecPsk::swanctl_secret`] wrote (a resumed run reads your end's key back from
    /// the state directory); `None` unless it is `0s` and the base64 of 32 bytes.
    pub fn from_swanctl_secret(text: &str) -> Option<Self> {
        let b64 = text.trim().strip_prefix("0s")?;
        let raw = base64::decode(b64).ok()?;
        (raw.len() == PSK_BYTES).then(|| IpsecPsk(b64.to_owned()))
    }
}

/// The name of a path's IKE and child SA in swanctl (and of its config file).
pub fn connection_name(path: &str) -> String {
    format!("xbench-{path}")
}

/// The swanctl configuration of gateway `own_host`, one end of `vpn`'s tunnel: the connection
/// and its secret. The initiator (the client side) dials `peer_address` and starts the tunnel
/// as soon as the file is loaded, restarting it if the peer goes silent; the responder
/// accepts the peer from any address (its public address is behind NAT) and proves nothing
/// but the key. The same text goes onto the instance and into the namespace test.
pub fn swanctl_conf(
    vpn: &VpnEnd,
    own_host: &str,
    psk: &IpsecPsk,
    peer_address: Option<Ipv4Addr>,
) -> String {
    connection(vpn, own_host, psk, peer_address, false)
}

/// One end's swanctl file; with `encap`, UDP encapsulation of ESP is forced
/// (charon fakes NAT detection), for a path where something between the ends carries only
/// UDP — a Global Accelerator.
fn connection(
    vpn: &VpnEnd,
    own_host: &str,
    psk: &IpsecPsk,
    peer_address: Option<Ipv4Addr>,
    encap: bool,
) -> String {
    let name = connection_name(&vpn.path);
    let peer = &vpn.peer_host;
    let remote_addrs = peer_address.map_or_else(|| "%any".to_owned(), |a| a.to_string());
    // The initiator never gives up: unlimited keying tries (swanctl's default is one, after
    // which charon abandons the tunnel for good), a dead peer restarts the tunnel, and so does
    // a close. Its peer may not let IKE in yet when it first dials (a security-group rule
    // naming its address added moments later, a responder still installing strongSwan), and
    // unlike WireGuard's keepalive, IKE does not recover from that by itself.
    let (start, dpd, close, tries) = if vpn.initiator {
        ("start", "restart", "start", "    keyingtries = 0\n")
    } else {
        ("none", "clear", "none", "")
    };
    format!(
        "# xbench-deploy: IPsec (IKEv2, pre-shared key) of vpn path {path}, this end {own_host}.\n\
         connections {{\n\
         \x20 {name} {{\n\
         \x20   version = 2\n\
         \x20   local_addrs = %any\n\
         \x20   remote_addrs = {remote_addrs}\n\
         \x20   proposals = {IKE_PROPOSALS}\n\
         \x20   dpd_delay = 10s\n\
         {tries}\
         {encap}\
         \x20   local {{\n\
         \x20     auth = psk\n\
         \x20     id = {own_host}\n\
         \x20   }}\n\
         \x20   remote {{\n\
         \x20     auth = psk\n\
         \x20     id = {peer}\n\
         \x20   }}\n\
         \x20   children {{\n\
         \x20     {name} {{\n\
         \x20       local_ts = {local}\n\
         \x20       remote_ts = {remote}\n\
         \x20       esp_proposals = {ESP_PROPOSALS}\n\
         \x20       start_action = {start}\n\
         \x20       dpd_action = {dpd}\n\
         \x20       close_action = {close}\n\
         \x20     }}\n\
         \x20   }}\n\
         \x20 }}\n\
         }}\n\
         secrets {{\n\
         \x20 ike-{name} {{\n\
         \x20   id-local = {own_host}\n\
         \x20   id-remote = {peer}\n\
         \x20   secret = {secret}\n\
         \x20 }}\n\
         }}\n",
        path = vpn.path,
        local = vpn.local_subnet,
        remote = vpn.remote_subnet,
        secret = psk.swanctl_secret(),
        encap = if encap { "    encap = yes\n" } else { "" },
    )
}

/// What your end's configuration says about where it dials.
#[derive(Debug, Clone, Copy)]
pub struct HomeDial {
    /// The gateway's public address.
    pub gateway_ip: Ipv4Addr,
    /// The accelerator's static address in front of it, if any: what your end dials then.
    pub accelerator_ip: Option<Ipv4Addr>,
}

impl HomeDial {
    /// The address your end dials.
    pub fn address(&self) -> Ipv4Addr {
        self.accelerator_ip.unwrap_or(self.gateway_ip)
    }
}

/// The swanctl file for your end of a `vpn` path to your own host, with a short how-to in
/// its comments: your end dials the gateway (or the accelerator in front of it), always (the
/// gateway never can: your router's NAT and the accelerator carry nothing that starts on
/// AWS's side), and forces ESP into UDP 4500 (an accelerator carries no ESP; through plain NAT
/// it would move there anyway). The connection is the gateway's mirror image: the same
/// proposals, identities and key. `run` names the run this is for.
pub fn home_swanctl_conf(
    run: &str,
    home: &crate::plan::HomeVpnPlan,
    psk: &IpsecPsk,
    dial: HomeDial,
) -> String {
    let front = match dial.accelerator_ip {
        Some(a) => format!(
            "Global Accelerator {a} (UDP 500 and 4500) in front of {} ({})",
            home.gateway, dial.gateway_ip
        ),
        None => format!("{} at {}", home.gateway, dial.gateway_ip),
    };
    let file = format!("{}.conf", connection_name(&home.path));
    format!(
        "# xbench-deploy run {run}: YOUR end of vpn path {path} (IPsec, IKEv2, pre-shared key).\n\
         # The AWS end: {front}. Your end dials it; it accepts {public} only.\n\
         # Tunnelled: {local} (yours) <-> {remote} (the run's).\n\
         #\n\
         # 1. strongSwan with swanctl: Debian/Ubuntu `apt install charon-systemd strongswan-swanctl`,\n\
         #    Fedora/RHEL/Amazon Linux `dnf install strongswan` (its directory: /etc/strongswan/swanctl).\n\
         # 2. This file, which holds the key, to /etc/swanctl/conf.d/{file}, mode 0600.\n\
         # 3. `swanctl --load-all`: your end dials at once and redials if the tunnel drops;\n\
         #    `swanctl --list-sas` shows ESTABLISHED and INSTALLED once it is up.\n\
         # 4. Your router lets UDP 500 and 4500 out to {dial}. If strongSwan runs on another machine\n\
         #    than the xbench host, that host reaches {remote} through it (its default route, usually).\n\
         # 5. Measure: the xbench command `xbench-deploy up` printed for path {path}.\n\
         # `swanctl --terminate --ike {name}` and deleting this file end it; `xbench-deploy down`\n\
         # deletes the AWS end.\n\
         {conn}",
        path = home.path,
        public = home.public_ip,
        local = home.on_prem_cidr,
        remote = home.aws_subnet,
        dial = dial.address(),
        name = connection_name(&home.path),
        conn = connection(
            &home.home_end(),
            &home.home_id,
            psk,
            Some(dial.address()),
            true
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::VpnFlavour;

    fn end(initiator: bool) -> VpnEnd {
        VpnEnd {
            path: "vpn".into(),
            flavour: VpnFlavour::Ipsec,
            peer_host: if initiator {
                "gw-vpn-server"
            } else {
                "gw-vpn-client"
            }
            .into(),
            tunnel_address: Ipv4Addr::new(169, 254, 200, 1),
            local_subnet: if initiator {
                "10.1.1.0/24"
            } else {
                "10.2.0.0/24"
            }
            .parse()
            .unwrap(),
            remote_subnet: if initiator {
                "10.2.0.0/24"
            } else {
                "10.1.1.0/24"
            }
            .parse()
            .unwrap(),
            initiator,
        }
    }

    #[test]
    fn the_two_ends_mirror_each_other_and_share_the_key() {
        let psk = IpsecPsk::generate().unwrap();
        let client = swanctl_conf(
            &end(true),
            "gw-vpn-client",
            &psk,
            Some(Ipv4Addr::new(192, 0, 2, 9)),
        );
        let server = swanctl_conf(&end(false), "gw-vpn-server", &psk, None);
        for want in [
            "remote_addrs = 192.0.2.9",
            "id = gw-vpn-client",
            "local_ts = 10.1.1.0/24",
            "remote_ts = 10.2.0.0/24",
            "start_action = start",
            "keyingtries = 0",
            "dpd_action = restart",
            "close_action = start",
            "version = 2",
        ] {
            assert!(client.contains(want), "{want} missing:\n{client}");
        }
        assert!(!server.contains("keyingtries"), "{server}");
        for want in [
            "remote_addrs = %any",
            "local_ts = 10.2.0.0/24",
            "remote_ts = 10.1.1.0/24",
            "start_action = none",
        ] {
            assert!(server.contains(want), "{want} missing:\n{server}");
        }
        let secret = format!("secret = {}", psk.swanctl_secret());
        assert!(client.contains(&secret) && server.contains(&secret));
        // Braces balance: swanctl refuses the file otherwise.
        for conf in [&client, &server] {
            assert_eq!(conf.matches('{').count(), conf.matches('}').count());
        }
    }

    #[test]
    fn your_end_dials_the_accelerator_forces_udp_and_mirrors_the_gateway() {
        let home = crate::plan::HomeVpnPlan {
            path: "home".into(),
            gateway: "gw-home".into(),
            home_id: "home-home".into(),
            vpc: "aws".into(),
            aws_subnet: "10.1.0.0/24".parse().unwrap(),
            on_prem_cidr: "192.168.1.0/24".parse().unwrap(),
            public_ip: Ipv4Addr::new(198, 51, 100, 7),
            accelerator: Some("home".into()),
        };
        let psk = IpsecPsk::generate().unwrap();
        let dial = HomeDial {
            gateway_ip: Ipv4Addr::new(203, 0, 113, 2),
            accelerator_ip: Some(Ipv4Addr::new(192, 0, 2, 100)),
        };
        let conf = home_swanctl_conf("xb-20261126-abcdef", &home, &psk, dial);
        for want in [
            "remote_addrs = 192.0.2.100",
            "encap = yes",
            "id = home-home",
            "id = gw-home",
            "local_ts = 192.168.1.0/24",
            "remote_ts = 10.1.0.0/24",
            "start_action = start",
            "Global Accelerator 192.0.2.100 (UDP 500 and 4500) in front of gw-home (203.0.113.2)",
            "/etc/swanctl/conf.d/xbench-home.conf",
            "run xb-20261126-abcdef",
        ] {
            assert!(conf.contains(want), "{want} missing:\n{conf}");
        }
        assert!(conf.contains(&format!("secret = {}", psk.swanctl_secret())));
        // The gateway's side: the same identities the other way round, the same key.
        let gw = swanctl_conf(&end_of(&home), "gw-home", &psk, None);
        assert!(gw.contains("remote_addrs = %any") && gw.contains("remote_ts = 192.168.1.0/24"));
        assert!(!gw.contains("encap"));
        let direct = home_swanctl_conf(
            "r",
            &home,
            &psk,
            HomeDial {
                accelerator_ip: None,
                ..dial
            },
        );
        assert!(direct.contains("remote_addrs = 203.0.113.2"), "{direct}");
        for conf in [&conf, &direct] {
            assert_eq!(conf.matches('{').count(), conf.matches('}').count());
        }
        // Read back as a resumed run does; anything else is refused.
        let back = IpsecPsk::from_swanctl_secret(&format!("{}\n", psk.swanctl_secret()));
        assert_eq!(back, Some(psk));
        assert_eq!(IpsecPsk::from_swanctl_secret("0sAAAA"), None);
        assert_eq!(IpsecPsk::from_swanctl_secret("secret"), None);
    }

    fn end_of(home: &crate::plan::HomeVpnPlan) -> VpnEnd {
        VpnEnd {
            path: home.path.clone(),
            flavour: VpnFlavour::Ipsec,
            peer_host: home.home_id.clone(),
            tunnel_address: Ipv4Addr::UNSPECIFIED,
            local_subnet: home.aws_subnet,
            remote_subnet: home.on_prem_cidr,
            initiator: false,
        }
    }

    #[test]
    fn keys_are_32_random_bytes_that_debug_hides() {
        let a = IpsecPsk::generate().unwrap();
        let b = IpsecPsk::generate().unwrap();
        assert_ne!(a, b);
        let secret = a.swanctl_secret();
        let raw = base64::decode(secret.strip_prefix("0s").unwrap()).unwrap();
        assert_eq!(raw.len(), PSK_BYTES);
        assert!(!format!("{a:?}").contains(&a.0));
    }
}
