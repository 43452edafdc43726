//! EC2 placement groups (a scenario's `placement = "cluster"` on a VPC).
//!
//! The moto emulator does not implement placement groups, so the calls sit behind
//! [`PlacementGroupApi`]: [`Ec2PlacementGroups`] calls EC2, [`FakePlacementGroups`] keeps them
//! in memory for tests. Not for launching instances into a group (that is a field of
//! RunInstances in [`crate::apply`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use aws_sdk_ec2::types::{PlacementStrategy as Ec2Strategy, ResourceType};

use crate::aws::ec2::{Selector, tag_spec};
use crate::aws::{BoxFuture, RegionClients, aws_error};
use crate::error::Error;
use crate::scenario::PlacementStrategy;
use crate::state::{RunTags, TAG_RUN};

/// A placement group as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementGroupInfo {
    /// Name (unique per region).
    pub name: String,
    /// Region.
    pub region: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// The placement-group calls this tool makes.
pub trait PlacementGroupApi: Send + Sync + std::fmt::Debug {
    /// Groups `sel` selects in `r`'s region.
    fn find<'a>(
        &'a self,
        r: &'a RegionClients,
        sel: &'a Selector,
    ) -> BoxFuture<'a, Result<Vec<PlacementGroupInfo>, Error>>;
    /// Creates a group.
    fn create<'a>(
        &'a self,
        r: &'a RegionClients,
        name: &'a str,
        strategy: PlacementStrategy,
        tags: &'a RunTags,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>>;
    /// Deletes a group (AWS refuses while instances are in it).
    fn delete<'a>(
        &'a self,
        r: &'a RegionClients,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>>;
}

/// The group name for plan key `key` of a run.
pub fn group_name(tags: &RunTags, key: &str) -> String {
    format!("xbench-{}-{key}", tags.run)
}

/// [`PlacementGroupApi`] against EC2.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ec2PlacementGroups;

impl PlacementGroupApi for Ec2PlacementGroups {
    fn find<'a>(
        &'a self,
        r: &'a RegionClients,
        sel: &'a Selector,
    ) -> BoxFuture<'a, Result<Vec<PlacementGroupInfo>, Error>> {
        Box::pin(async move {
            let out = r
                .ec2
                .describe_placement_groups()
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("tag-key")
                        .values(TAG_RUN)
                        .build(),
                )
                .send()
                .await
                .map_err(|e| aws_error("DescribePlacementGroups", &r.region, e))?;
            Ok(out
                .placement_groups()
                .iter()
                .filter(|g| !matches!(g.state().map(|s| s.as_str()), Some("deleted" | "deleting")))
                .map(|g| PlacementGroupInfo {
                    name: g.group_name().unwrap_or_default().to_owned(),
                    region: r.region.clone(),
                    tags: g
                        .tags()
                        .iter()
                        .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
                        .collect(),
                })
                .filter(|g| sel.selects(&g.tags))
                .collect())
        })
    }

    fn create<'a>(
        &'a self,
        r: &'a RegionClients,
        name: &'a str,
        strategy: PlacementStrategy,
        tags: &'a RunTags,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let strategy = match strategy {
                PlacementStrategy::Cluster => Ec2Strategy::Cluster,
                PlacementStrategy::Spread => Ec2Strategy::Spread,
                PlacementStrategy::Partition => Ec2Strategy::Partition,
            };
            r.ec2
                .create_placement_group()
                .group_name(name)
                .strategy(strategy)
                .tag_specifications(tag_spec(ResourceType::PlacementGroup, tags, key))
                .send()
                .await
                .map_err(|e| aws_error("CreatePlacementGroup", &r.region, e))?;
            Ok(())
        })
    }

    fn delete<'a>(
        &'a self,
        r: &'a RegionClients,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            r.ec2
                .delete_placement_group()
                .group_name(name)
                .send()
                .await
                .map_err(|e| aws_error("DeletePlacementGroup", &r.region, e))?;
            Ok(())
        })
    }
}

/// An in-memory [`PlacementGroupApi`] for tests.
#[derive(Debug, Default)]
pub struct FakePlacementGroups {
    groups: Mutex<BTreeMap<(String, String), PlacementGroupInfo>>,
    created: std::sync::atomic::AtomicUsize,
}

impl FakePlacementGroups {
    /// The groups that exist, as `region/name`.
    pub fn names(&self) -> Vec<String> {
        self.lock()
            .keys()
            .map(|(r, n)| format!("{r}/{n}"))
            .collect()
    }

    /// How many groups were ever created.
    pub fn created(&self) -> usize {
        self.created.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), PlacementGroupInfo>> {
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PlacementGroupApi for FakePlacementGroups {
    fn find<'a>(
        &'a self,
        r: &'a RegionClients,
        sel: &'a Selector,
    ) -> BoxFuture<'a, Result<Vec<PlacementGroupInfo>, Error>> {
        Box::pin(async move {
            Ok(self
                .lock()
                .values()
                .filter(|g| g.region == r.region && sel.selects(&g.tags))
                .cloned()
                .collect())
        })
    }

    fn create<'a>(
        &'a self,
        r: &'a RegionClients,
        name: &'a str,
        _strategy: PlacementStrategy,
        tags: &'a RunTags,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let mut g = self.lock();
            let k = (r.region.clone(), name.to_owned());
            if g.contains_key(&k) {
                return Err(Error::Aws {
                    operation: "CreatePlacementGroup",
                    region: r.region.clone(),
                    code: Some("InvalidPlacementGroup.Duplicate".into()),
                    message: format!("The placement group '{name}' already exists."),
                });
            }
            self.created
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            g.insert(
                k,
                PlacementGroupInfo {
                    name: name.to_owned(),
                    region: r.region.clone(),
                    tags: tags.for_resource(key).into_iter().collect(),
                },
            );
            Ok(())
        })
    }

    fn delete<'a>(
        &'a self,
        r: &'a RegionClients,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            match self.lock().remove(&(r.region.clone(), name.to_owned())) {
                Some(_) => Ok(()),
                None => Err(Error::Aws {
                    operation: "DeletePlacementGroup",
                    region: r.region.clone(),
                    code: Some("InvalidPlacementGroup.Unknown".into()),
                    message: format!("The Placement Group '{name}' is unknown."),
                }),
            }
        })
    }
}
