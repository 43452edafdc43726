//! Your gateways, as hybrid `existing` paths use them: reading a virtual private gateway or
//! Transit Gateway you named (`via`), and attaching a VGW to the run's VPC or detaching it.
//! Nothing here creates, modifies or deletes the gateway itself. Not for finding a run's VGW
//! attachments (that is [`super::ec2::discover`]) or for deciding when to attach (that is
//! [`crate::apply`]).

use crate::aws::{RegionClients, aws_error};
use crate::error::{Error, not_found_is_none};
use crate::hybrid::PrivateGateway;

/// What AWS says about one gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayFacts {
    /// `available`, `pending`, `deleting`, `deleted`...
    pub state: String,
    /// A VGW's VPC attachments that are not gone: (VPC id, `attaching` or `attached`, or
    /// `detaching`).
    pub attachments: Vec<(String, String)>,
}

/// `g` in `r`'s region, or `None` when that region has no such gateway (or only a deleted one).
pub async fn describe(
    r: &RegionClients,
    g: &PrivateGateway,
) -> Result<Option<GatewayFacts>, Error> {
    let region = r.region.as_str();
    let facts = match g {
        PrivateGateway::Vgw(id) => {
            let out = r
                .ec2
                .describe_vpn_gateways()
                .vpn_gateway_ids(id)
                .send()
                .await;
            let out = match out {
                Ok(o) => o,
                Err(e) => return not_found_is_none(aws_error("DescribeVpnGateways", region, e)),
            };
            out.vpn_gateways()
                .iter()
                .find(|v| v.vpn_gateway_id() == Some(id.as_str()))
                .map(|v| GatewayFacts {
                    state: v.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                    attachments: v
                        .vpc_attachments()
                        .iter()
                        .filter_map(|a| {
                            let state = a.state().map(|s| s.as_str().to_owned())?;
                            (state != "detached")
                                .then(|| (a.vpc_id().unwrap_or_default().to_owned(), state))
                        })
                        .collect(),
                })
        }
        PrivateGateway::Tgw(id) => {
            let out = r
                .ec2
                .describe_transit_gateways()
                .transit_gateway_ids(id)
                .send()
                .await;
            let out = match out {
                Ok(o) => o,
                Err(e) => {
                    return not_found_is_none(aws_error("DescribeTransitGateways", region, e));
                }
            };
            out.transit_gateways()
                .iter()
                .find(|t| t.transit_gateway_id() == Some(id.as_str()))
                .map(|t| GatewayFacts {
                    state: t.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                    attachments: Vec::new(),
                })
        }
    };
    Ok(facts.filter(|f| f.state != "deleted"))
}

/// Attaches VGW `vgw` to `vpc` (AWS's one attachment per VGW).
pub async fn attach_vgw(r: &RegionClients, vgw: &str, vpc: &str) -> Result<(), Error> {
    r.ec2
        .attach_vpn_gateway()
        .vpn_gateway_id(vgw)
        .vpc_id(vpc)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("AttachVpnGateway", &r.region, e))
}

/// Detaches VGW `vgw` from `vpc`; the gateway itself stays.
pub async fn detach_vgw(r: &RegionClients, vgw: &str, vpc: &str) -> Result<(), Error> {
    r.ec2
        .detach_vpn_gateway()
        .vpn_gateway_id(vgw)
        .vpc_id(vpc)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_error("DetachVpnGateway", &r.region, e))
}

/// The state of `vgw`'s attachment to `vpc`, `None` once it is gone (or the gateway is).
pub async fn vgw_attachment_state(
    r: &RegionClients,
    vgw: &str,
    vpc: &str,
) -> Result<Option<String>, Error> {
    let facts = describe(r, &PrivateGateway::Vgw(vgw.to_owned())).await?;
    Ok(facts.and_then(|f| {
        f.attachments
            .into_iter()
            .find(|(v, _)| v == vpc)
            .map(|(_, s)| s)
    }))
}
