//! VPN paths to your own VPN end: the gateway launched with a key made for the tunnel (kept in
//! the state directory, mode 0600, before the gateway exists, so a resumed run can still write
//! your end's configuration), source/destination check off; and once every address is known
//! (the gateway's, the accelerator's), your end's swanctl file written beside the outputs.
//! Routes, rules and the accelerator go with the others (`network.rs`, `mod.rs`).

use tracing::info;

use super::Build;
use crate::error::Error;
use crate::ipsec::{self, HomeDial, IpsecPsk};
use crate::state::{HomeEndOutput, write_secret_file};
use crate::userdata;

impl Build<'_> {
    /// The gateway of each path to your VPN end: adopted when it and its key survive from an
    /// earlier attempt, else (re)made with a fresh key.
    pub(super) async fn home_gateways(&self) -> Result<(), Error> {
        for h in &self.plan.home_vpns {
            let host = self
                .plan
                .host(&h.gateway)
                .ok_or_else(|| Error::Internal(format!("no host {}", h.gateway)))?;
            let vpn = host
                .vpn
                .as_ref()
                .ok_or_else(|| Error::Internal(format!("{} has no tunnel", h.gateway)))?;
            let r = self.region(&host.vpc)?;
            let found = self.existing(&r.region, |i| &i.instances, &format!("host/{}", host.key));
            let key_file = self.d.state.home_key_file(&self.tags.run, &h.path);
            let saved = std::fs::read_to_string(&key_file)
                .ok()
                .and_then(|t| IpsecPsk::from_swanctl_secret(&t));
            match (found, saved) {
                (Some(_), Some(_)) => self.adopt(host).await?,
                (found, _) => {
                    // The key lives only in the gateway's boot script and the file: a gateway
                    // whose key is lost cannot be paired with your end. Replace it.
                    if let Some(f) = found {
                        info!(
                            "replacing vpn gateway {} in {}: its key is not kept",
                            f.id, r.region
                        );
                        crate::teardown::terminate_and_wait(
                            &r,
                            std::slice::from_ref(&f.id),
                            &self.d.timing,
                        )
                        .await?;
                        if let Some(inv) = self.ids().inventory.get_mut(&r.region) {
                            inv.instances.retain(|i| i.id != f.id);
                        }
                    }
                    let psk = IpsecPsk::generate()?;
                    write_secret_file(&key_file, psk.swanctl_secret().as_bytes())?;
                    let script = userdata::ipsec_gateway(
                        &self.tags.run,
                        &host.key,
                        &self.tags.deletion_due,
                        vpn,
                        &psk,
                        None,
                    );
                    self.host(host, script).await?;
                }
            }
            self.no_source_dest_check(host).await?;
        }
        Ok(())
    }

    /// Writes your end's swanctl file for each path to your VPN end; what the outputs say.
    pub(super) fn home_ends(&self) -> Result<Vec<HomeEndOutput>, Error> {
        let mut out = Vec::new();
        for h in &self.plan.home_vpns {
            let key_file = self.d.state.home_key_file(&self.tags.run, &h.path);
            let psk = std::fs::read_to_string(&key_file)
                .ok()
                .and_then(|t| IpsecPsk::from_swanctl_secret(&t))
                .ok_or_else(|| Error::StateFile {
                    path: key_file.display().to_string(),
                    message: "the key of your VPN end is missing or damaged; `up --run-id` again replaces the gateway with a new key".into(),
                })?;
            let gateway_ip = self.host_ids(&h.gateway)?.public_ip.ok_or_else(|| {
                Error::Internal(format!("vpn gateway {} has no public address", h.gateway))
            })?;
            let accelerator_ip =
                match &h.accelerator {
                    Some(k) => {
                        Some(self.ids().accelerators.get(k).copied().ok_or_else(|| {
                            Error::Internal(format!("accelerator {k} not made yet"))
                        })?)
                    }
                    None => None,
                };
            let dial = HomeDial {
                gateway_ip,
                accelerator_ip,
            };
            let config = self.d.state.home_config_file(&self.tags.run, &h.path);
            let text = ipsec::home_swanctl_conf(self.tags.run.as_str(), h, &psk, dial);
            write_secret_file(&config, text.as_bytes())?;
            info!("your end of {}: {}", h.path, config.display());
            out.push(HomeEndOutput {
                path: h.path.clone(),
                gateway: h.gateway.clone(),
                gateway_ip,
                accelerator_ip,
                dial: dial.address(),
                public_ip: h.public_ip,
                on_prem_cidr: h.on_prem_cidr,
                aws_subnet: h.aws_subnet,
                config,
            });
        }
        Ok(out)
    }
}
