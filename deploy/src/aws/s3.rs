//! The run's private S3 bucket: made by `up` in the run's first region, tagged like every other
//! resource, closed to the public and to requests without TLS; it holds the xbench binary the
//! hosts copy with their instance profile (which may read that object only), and the results
//! `run` collects (each host uploads its report through a presigned PUT made for that run).
//! Deleted with its objects by `down`.
//!
//! Bucket names are global, so a run's bucket is `xbench-<run-id>-<8 hex>`, found again by
//! that prefix (ListBuckets) and confirmed by its tags. Not for deciding when to make or
//! delete it (see [`crate::apply`] and [`crate::teardown`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketLocationConstraint, CreateBucketConfiguration, PublicAccessBlockConfiguration, Tag,
    Tagging,
};

use crate::aws::ec2::Selector;
use crate::aws::{Aws, aws_error};
use crate::error::Error;
use crate::state::{RunId, RunTags};

/// Where the binary lives in a run's bucket.
pub const BINARY_KEY: &str = "xbench/xbench";

/// A run's bucket.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunBucket {
    /// Bucket name.
    pub name: String,
    /// Its region.
    pub region: String,
}

/// A bucket found by its name and tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundBucket {
    /// The bucket.
    pub bucket: RunBucket,
    /// Its tags.
    pub tags: BTreeMap<String, String>,
}

/// A presigned request: what a host sends with `curl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presigned {
    /// The URL, signature included.
    pub url: String,
    /// Headers the signature covers, which the request must carry.
    pub headers: Vec<(String, String)>,
}

/// The name prefix of run `run`'s bucket.
pub fn bucket_prefix(run: &RunId) -> String {
    format!("xbench-{run}-")
}

fn client(aws: &Aws, region: &str) -> aws_sdk_s3::Client {
    aws.region(region).s3
}

/// Finds the buckets `sel` selects (ListBuckets is global; each bucket's region and tags are
/// asked of it).
pub async fn find(aws: &Aws, sel: &Selector) -> Result<Vec<FoundBucket>, Error> {
    let home = crate::regions::ACCELERATOR_API_REGION;
    let c = client(aws, home);
    let out = c
        .list_buckets()
        .send()
        .await
        .map_err(|e| aws_error("ListBuckets", home, e))?;
    let prefix = match sel {
        Selector::Run(r) => bucket_prefix(r),
        Selector::AnyRun => "xbench-xb-".to_owned(),
    };
    let mut found = Vec::new();
    for b in out.buckets() {
        let Some(name) = b.name().filter(|n| n.starts_with(&prefix)) else {
            continue;
        };
        let region = match b.bucket_region() {
            Some(r) => r.to_owned(),
            None => location(&c, name).await?,
        };
        let tags = match tags(&client(aws, &region), name, &region).await {
            Ok(t) => t,
            // Deleted meanwhile (another `down`): nothing to do.
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        if sel.selects(&tags) {
            found.push(FoundBucket {
                bucket: RunBucket {
                    name: name.to_owned(),
                    region,
                },
                tags,
            });
        }
    }
    Ok(found)
}

async fn location(c: &aws_sdk_s3::Client, name: &str) -> Result<String, Error> {
    let out = c
        .get_bucket_location()
        .bucket(name)
        .send()
        .await
        .map_err(|e| aws_error("GetBucketLocation", "us-east-1", e))?;
    // An empty constraint is us-east-1, S3's oldest convention.
    Ok(out
        .location_constraint()
        .map(|l| l.as_str().to_owned())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "us-east-1".to_owned()))
}

async fn tags(
    c: &aws_sdk_s3::Client,
    name: &str,
    region: &str,
) -> Result<BTreeMap<String, String>, Error> {
    match c.get_bucket_tagging().bucket(name).send().await {
        Ok(out) => Ok(out
            .tag_set()
            .iter()
            .map(|t| (t.key().to_owned(), t.value().to_owned()))
            .collect()),
        Err(e) => {
            let e = aws_error("GetBucketTagging", region, e);
            // A bucket of ours always has tags; one without is not ours.
            if e.aws_code() == Some("NoSuchTagSet") {
                Ok(BTreeMap::new())
            } else {
                Err(e)
            }
        }
    }
}

/// Finds run `tags.run`'s bucket, or creates it in `region`: private (every public-access
/// block on), tagged.
pub async fn ensure(aws: &Aws, region: &str, tags: &RunTags) -> Result<RunBucket, Error> {
    if let Some(b) = find(aws, &Selector::Run(tags.run.clone()))
        .await?
        .into_iter()
        .next()
    {
        return Ok(b.bucket);
    }
    let mut suffix = [0u8; 4];
    getrandom::fill(&mut suffix).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
    let name = format!(
        "{}{}",
        bucket_prefix(&tags.run),
        suffix
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let c = client(aws, region);
    let mut req = c.create_bucket().bucket(&name);
    if region != "us-east-1" {
        req = req.create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(region))
                .build(),
        );
    }
    req.send()
        .await
        .map_err(|e| aws_error("CreateBucket", region, e))?;
    // Tags first: if anything below fails, `down` and `gc` still find the bucket.
    let mut tagging = Tagging::builder();
    for (k, v) in tags.for_resource("bucket") {
        tagging = tagging.tag_set(
            Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(|e| Error::Internal(format!("bucket tag: {e}")))?,
        );
    }
    let tagging = tagging
        .build()
        .map_err(|e| Error::Internal(format!("bucket tags: {e}")))?;
    c.put_bucket_tagging()
        .bucket(&name)
        .tagging(tagging)
        .send()
        .await
        .map_err(|e| aws_error("PutBucketTagging", region, e))?;
    c.put_public_access_block()
        .bucket(&name)
        .public_access_block_configuration(
            PublicAccessBlockConfiguration::builder()
                .block_public_acls(true)
                .ignore_public_acls(true)
                .block_public_policy(true)
                .restrict_public_buckets(true)
                .build(),
        )
        .send()
        .await
        .map_err(|e| aws_error("PutPublicAccessBlock", region, e))?;
    if aws.tls_only_buckets() {
        c.put_bucket_policy()
            .bucket(&name)
            .policy(tls_only_policy(&name))
            .send()
            .await
            .map_err(|e| aws_error("PutBucketPolicy", region, e))?;
    } else {
        tracing::warn!(
            "bucket {name}: not refusing non-TLS requests: the endpoint is plain http, which such a bucket would refuse entirely"
        );
    }
    Ok(RunBucket {
        name,
        region: region.to_owned(),
    })
}

/// The bucket's policy: every request that does not come over TLS is refused, whoever makes
/// it (hosts, presigned URLs, the operator).
pub fn tls_only_policy(bucket: &str) -> String {
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "TlsOnly",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [format!("arn:aws:s3:::{bucket}"), format!("arn:aws:s3:::{bucket}/*")],
            "Condition": { "Bool": { "aws:SecureTransport": "false" } }
        }]
    })
    .to_string()
}

/// Uploads the file at `path` as `key`.
pub async fn upload(aws: &Aws, b: &RunBucket, key: &str, path: &Path) -> Result<(), Error> {
    let body = ByteStream::from_path(path)
        .await
        .map_err(|e| Error::StateFile {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    client(aws, &b.region)
        .put_object()
        .bucket(&b.name)
        .key(key)
        .body(body)
        .send()
        .await
        .map_err(|e| aws_error("PutObject", &b.region, e))?;
    Ok(())
}

/// A presigned PUT of `key`, valid for `lifetime`.
pub async fn presign_put(
    aws: &Aws,
    b: &RunBucket,
    key: &str,
    lifetime: Duration,
) -> Result<Presigned, Error> {
    let conf = presigning(lifetime)?;
    let req = client(aws, &b.region)
        .put_object()
        .bucket(&b.name)
        .key(key)
        .presigned(conf)
        .await
        .map_err(|e| aws_error("PutObject (presign)", &b.region, e))?;
    Ok(presigned(&req))
}

fn presigning(lifetime: Duration) -> Result<PresigningConfig, Error> {
    PresigningConfig::expires_in(lifetime)
        .map_err(|e| Error::Internal(format!("presigning for {lifetime:?}: {e}")))
}

fn presigned(req: &aws_sdk_s3::presigning::PresignedRequest) -> Presigned {
    Presigned {
        url: req.uri().to_owned(),
        headers: req
            .headers()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    }
}

/// The object `key`, or `None` when it does not exist.
pub async fn get(aws: &Aws, b: &RunBucket, key: &str) -> Result<Option<Vec<u8>>, Error> {
    let out = client(aws, &b.region)
        .get_object()
        .bucket(&b.name)
        .key(key)
        .send()
        .await;
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            let e = aws_error("GetObject", &b.region, e);
            return if e.aws_code() == Some("NoSuchKey") {
                Ok(None)
            } else {
                Err(e)
            };
        }
    };
    let bytes = out.body.collect().await.map_err(|e| Error::Aws {
        operation: "GetObject",
        region: b.region.clone(),
        code: None,
        message: format!("reading the body: {e}"),
    })?;
    Ok(Some(bytes.into_bytes().to_vec()))
}

/// Deletes object `key` (done when it is not there).
pub async fn delete_object(aws: &Aws, b: &RunBucket, key: &str) -> Result<(), Error> {
    client(aws, &b.region)
        .delete_object()
        .bucket(&b.name)
        .key(key)
        .send()
        .await
        .map_err(|e| aws_error("DeleteObject", &b.region, e))?;
    Ok(())
}

/// Deletes every object of the bucket, then the bucket. A bucket that is gone is done.
pub async fn delete_bucket(aws: &Aws, b: &RunBucket) -> Result<(), Error> {
    let c = client(aws, &b.region);
    let gone = |e: &Error| e.aws_code() == Some("NoSuchBucket");
    loop {
        let out = match c.list_objects_v2().bucket(&b.name).send().await {
            Ok(o) => o,
            Err(e) => {
                let e = aws_error("ListObjectsV2", &b.region, e);
                return if gone(&e) { Ok(()) } else { Err(e) };
            }
        };
        let keys: Vec<String> = out
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect();
        if keys.is_empty() {
            break;
        }
        for k in keys {
            delete_object(aws, b, &k).await?;
        }
    }
    match c.delete_bucket().bucket(&b.name).send().await {
        Ok(_) => Ok(()),
        Err(e) => {
            let e = aws_error("DeleteBucket", &b.region, e);
            if gone(&e) { Ok(()) } else { Err(e) }
        }
    }
}
