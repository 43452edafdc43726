//! AMI ids from SSM parameters: AWS publishes the latest Amazon Linux 2023 image per region and
//! architecture under `/aws/service/ami-amazon-linux-latest/`, so a scenario need not carry
//! per-region AMI ids. Not for other SSM features.

use crate::aws::{RegionClients, aws_error};
use crate::error::Error;
use crate::scenario::AmiChoice;

/// The parameter naming the latest Amazon Linux 2023 AMI for `arch` (`x86_64` or `arm64`).
pub fn al2023_parameter(arch: &str) -> String {
    format!("/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-{arch}")
}

/// The AMI id `choice` means in `r`'s region, for an instance type supporting `architectures`.
pub async fn resolve_ami(
    r: &RegionClients,
    choice: &AmiChoice,
    architectures: &[String],
) -> Result<String, Error> {
    let parameter = match choice {
        AmiChoice::Id(id) => return Ok(id.clone()),
        AmiChoice::SsmParameter(p) => p.clone(),
        AmiChoice::AmazonLinux2023 => {
            // Prefer x86_64 when a type supports both (i386-capable types list several).
            let arch = if architectures.iter().any(|a| a == "x86_64") || architectures.is_empty() {
                "x86_64"
            } else if architectures.iter().any(|a| a == "arm64") {
                "arm64"
            } else {
                return Err(Error::Ami {
                    what: "Amazon Linux 2023".into(),
                    region: r.region.clone(),
                    message: format!(
                        "the instance type's architectures ({}) have no Amazon Linux 2023 image",
                        architectures.join(", ")
                    ),
                });
            };
            al2023_parameter(arch)
        }
    };
    let out = r
        .ssm
        .get_parameter()
        .name(&parameter)
        .send()
        .await
        .map_err(|e| aws_error("GetParameter", &r.region, e))?;
    out.parameter()
        .and_then(|p| p.value())
        .filter(|v| v.starts_with("ami-"))
        .map(str::to_owned)
        .ok_or_else(|| Error::Ami {
            what: parameter,
            region: r.region.clone(),
            message: "the parameter does not hold an ami- id".into(),
        })
}
