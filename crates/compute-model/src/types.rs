//! The control-database entities (Nova's API database tables).

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::Timestamp;

/// The uuid Nova gives cell0 (where instances that could not be scheduled
/// are buried).
pub const CELL0_UUID: Uuid = Uuid::nil();

/// A flavor (Nova's `flavors` table with its extra specs and access list).
/// Instances and request specs carry a copy, so a later change to the
/// flavor does not change existing servers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Flavor {
    /// Internal id (creation order; Nova's `flavors.id`).
    pub id: i64,
    /// Public id (`flavorid`, a string).
    pub flavorid: String,
    /// Unique name.
    pub name: String,
    /// RAM in MiB.
    pub memory_mb: i64,
    /// Virtual CPUs.
    pub vcpus: i64,
    /// Root disk in GiB.
    pub root_gb: i64,
    /// Ephemeral disk in GiB.
    pub ephemeral_gb: i64,
    /// Swap in MiB.
    pub swap: i64,
    /// Network bandwidth factor.
    pub rxtx_factor: f64,
    /// CPU weight, if set.
    pub vcpu_weight: Option<i64>,
    /// `OS-FLV-DISABLED:disabled`.
    pub disabled: bool,
    /// `os-flavor-access:is_public`.
    pub is_public: bool,
    /// Description (2.55).
    pub description: Option<String>,
    /// Extra specs.
    pub extra_specs: BTreeMap<String, String>,
    /// Projects with access to a private flavor.
    pub projects: BTreeSet<String>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last update.
    pub updated_at: Option<Timestamp>,
}

impl Flavor {
    /// Disk placement must find for it: root + ephemeral + swap (rounded up
    /// to GiB), as Nova's `ResourceRequest` computes `DISK_GB`.
    pub fn disk_gb(&self) -> i64 {
        self.root_gb + self.ephemeral_gb + (self.swap + 1023) / 1024
    }
}

/// An image (the subset of Glance v2 berth serves).
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// Image id.
    pub id: Uuid,
    /// Name (may be absent in Glance).
    pub name: Option<String>,
    /// Glance's status: `queued` until data is uploaded, `saving` while
    /// an upload runs, then `active`. Snapshot images berth records itself
    /// (shelve, lease snapshots) are `active` without data.
    pub status: String,
    /// `public`, `private`, `shared` or `community`.
    pub visibility: String,
    /// Deletion protection.
    pub protected: bool,
    /// Owning project.
    pub owner: Option<String>,
    /// Disk format (`qcow2`, `raw`, ...).
    pub disk_format: Option<String>,
    /// Container format (`bare`, ...).
    pub container_format: Option<String>,
    /// Minimum disk in GiB.
    pub min_disk: i64,
    /// Minimum RAM in MiB.
    pub min_ram: i64,
    /// Size in bytes, if known.
    pub size: Option<i64>,
    /// The hashes of the uploaded data (none before an upload).
    pub hashes: Option<ImageHashes>,
    /// Tags.
    pub tags: Vec<String>,
    /// Every other property (`hw_*`, `img_*`, `trait:*`, `os_distro`, ...).
    pub properties: BTreeMap<String, String>,
    /// The projects a `shared` image is shared with (Glance's image
    /// members), by project id.
    pub members: BTreeMap<String, ImageMember>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last update.
    pub updated_at: Timestamp,
}

/// One project an image is shared with, and what it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMember {
    /// `pending` until the member answers, then `accepted` or `rejected`.
    pub status: String,
    /// When the image was shared with the project.
    pub created_at: Timestamp,
    /// When the member status last changed.
    pub updated_at: Timestamp,
}

/// The hashes of an image's data, computed while it was uploaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageHashes {
    /// Glance's `checksum`: the MD5 hex digest.
    pub checksum: String,
    /// Glance's `os_hash_algo` (`sha512`).
    pub os_hash_algo: String,
    /// Glance's `os_hash_value`: the hex digest by `os_hash_algo`.
    pub os_hash_value: String,
}

impl Image {
    /// Traits this image requires (`trait:NAME=required` properties), as
    /// Nova's `ImageMetaProps.traits_required`.
    pub fn required_traits(&self) -> Vec<String> {
        image_required_traits(&self.properties)
    }

    /// Glance's visibility rule (`is_image_visible`): admins see every
    /// image, anyone a public or community one, a project its own and a
    /// `shared` one it is a member of, whatever its member status (the
    /// status decides only whether the image is *listed* by default).
    /// Booting takes only images the caller can see, so the image API and
    /// the compute API both ask this.
    pub fn visible_to(&self, project_id: Option<&str>, admin: bool) -> bool {
        admin
            || matches!(self.visibility.as_str(), "public" | "community")
            || self.owner.as_deref() == project_id
            || (self.visibility == "shared" && project_id.is_some_and(|p| self.members.contains_key(p)))
    }

    /// The caller's member status for this image, if it is a member.
    pub fn member_status(&self, project_id: Option<&str>) -> Option<&str> {
        project_id.and_then(|p| self.members.get(p)).map(|m| m.status.as_str())
    }
}

/// Traits required by image properties (`trait:NAME=required`).
pub fn image_required_traits(properties: &BTreeMap<String, String>) -> Vec<String> {
    properties
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("trait:").filter(|_| v == "required").map(str::to_owned))
        .collect()
}

/// A server group's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    /// All members on one host (hard).
    Affinity,
    /// Members on different hosts (hard; `max_server_per_host` relaxes it).
    AntiAffinity,
    /// Prefer one host.
    SoftAffinity,
    /// Prefer different hosts.
    SoftAntiAffinity,
}

impl GroupPolicy {
    /// Parse Nova's policy name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "affinity" => Some(Self::Affinity),
            "anti-affinity" => Some(Self::AntiAffinity),
            "soft-affinity" => Some(Self::SoftAffinity),
            "soft-anti-affinity" => Some(Self::SoftAntiAffinity),
            _ => None,
        }
    }

    /// Nova's policy name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Affinity => "affinity",
            Self::AntiAffinity => "anti-affinity",
            Self::SoftAffinity => "soft-affinity",
            Self::SoftAntiAffinity => "soft-anti-affinity",
        }
    }

    /// Hard policies are enforced at claim time.
    pub fn is_hard(self) -> bool {
        matches!(self, Self::Affinity | Self::AntiAffinity)
    }
}

/// A server group (`instance_groups` with its members).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerGroup {
    /// Group id.
    pub uuid: Uuid,
    /// Name.
    pub name: String,
    /// Owning project.
    pub project_id: String,
    /// Creating user.
    pub user_id: String,
    /// Policy.
    pub policy: GroupPolicy,
    /// `rules.max_server_per_host` (anti-affinity only, 2.64).
    pub max_server_per_host: Option<i64>,
    /// Member instance uuids in the order they joined.
    pub members: Vec<Uuid>,
    /// Creation time.
    pub created_at: Timestamp,
}

/// A key pair's kind (Nova's `keypairs.type`, shown from 2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPairType {
    /// An OpenSSH public key.
    Ssh,
    /// A PEM X.509 certificate (for WinRM).
    X509,
}

impl KeyPairType {
    /// The wire and stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyPairType::Ssh => "ssh",
            KeyPairType::X509 => "x509",
        }
    }

    /// Parse [`KeyPairType::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ssh" => Some(KeyPairType::Ssh),
            "x509" => Some(KeyPairType::X509),
            _ => None,
        }
    }
}

/// A Glance metadata-definition namespace with everything in it (its
/// objects, properties, tags and resource-type associations), one row per
/// namespace. The model keeps what writes are checked against (owner,
/// visibility, protection) typed and the rest as the image API's JSON
/// document, opaque here (this crate has no serde).
#[derive(Debug, Clone, PartialEq)]
pub struct MetadefNamespace {
    /// The namespace's name (unique).
    pub namespace: String,
    /// Owning project.
    pub owner: String,
    /// `public` or `private`.
    pub visibility: String,
    /// A protected namespace cannot be deleted.
    pub protected: bool,
    /// The rest, as the image API's JSON text.
    pub document: String,
}

/// A key pair (Nova's API-database `key_pairs`): it belongs to a user,
/// not to a project, and its name is unique per user.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyPair {
    /// Internal id (creation order; shown by `GET /os-keypairs/{name}`).
    pub id: i64,
    /// Owning user.
    pub user_id: String,
    /// Name, unique per user.
    pub name: String,
    /// `ssh` or `x509`.
    pub key_type: KeyPairType,
    /// The public key (OpenSSH line) or the PEM certificate.
    pub public_key: String,
    /// MD5 of the key blob (ssh) or SHA-1 of the certificate's DER (x509),
    /// colon-separated hex.
    pub fingerprint: String,
    /// Creation time.
    pub created_at: Timestamp,
}

/// A cell mapping (`cell_mappings`).
#[derive(Debug, Clone, PartialEq)]
pub struct CellMapping {
    /// Cell id ([`CELL0_UUID`] for cell0).
    pub uuid: Uuid,
    /// Name (`cell0`, `cell1`, ...).
    pub name: String,
    /// Where the cell's database is: `sqlite://PATH` or `postgres://...`.
    pub database_connection: String,
    /// A disabled cell is never chosen for new instances.
    pub disabled: bool,
}

/// A host mapping (`host_mappings`): which cell a compute host is in.
#[derive(Debug, Clone, PartialEq)]
pub struct HostMapping {
    /// Host name.
    pub host: String,
    /// Its cell.
    pub cell: Uuid,
    /// The agent identity (user id) the host is bound to: only it may
    /// register the host again, heartbeat for it or report on it, until an
    /// admin unbinds it. `None`: not bound (mapped by discovery, or before
    /// bindings existed); the next registration binds it.
    pub owner: Option<String>,
}

/// A per-host agent credential berth issued (embedded identity, without
/// Keystone): the agent of `host` authenticates with
/// `X-Auth-Token: berth-agent:HOST:SECRET`. Only the SHA-256 of the secret
/// is kept; the secret is shown once, when issued.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCredential {
    /// The host the credential speaks for (and only for).
    pub host: String,
    /// Lower-case hex SHA-256 of the secret.
    pub digest: String,
    /// When it was issued (seconds since the epoch).
    pub created_at: i64,
}

/// The token prefix of an agent credential.
pub const AGENT_CREDENTIAL_PREFIX: &str = "berth-agent:";

/// The agent identity (user id) of `host`'s credential: what the host is
/// bound to once its credential exists.
pub fn credential_identity(host: &str) -> String {
    format!("{AGENT_CREDENTIAL_PREFIX}{host}")
}

/// The host an agent identity speaks for, when it is a credential's.
pub fn credential_host(identity: &str) -> Option<&str> {
    identity.strip_prefix(AGENT_CREDENTIAL_PREFIX)
}

/// Which host, node and cell a compute node resource provider belongs to.
/// The scheduler maps placement's root providers back to hosts with it.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeNodeRef {
    /// Compute node uuid, which is its placement root provider's uuid.
    pub uuid: Uuid,
    /// Service host.
    pub host: String,
    /// Hypervisor hostname (the provider's name).
    pub node: String,
    /// Cell the host is mapped to.
    pub cell: Uuid,
}

/// A host aggregate (Nova's `aggregates`, hosts and metadata). Its hosts'
/// compute node providers are members of the placement aggregate with the
/// same uuid.
#[derive(Debug, Clone, PartialEq)]
pub struct Aggregate {
    /// Integer id (Nova's API shows it).
    pub id: i64,
    /// Uuid (also the placement aggregate's uuid).
    pub uuid: Uuid,
    /// Unique name.
    pub name: String,
    /// Metadata, including `availability_zone`.
    pub metadata: BTreeMap<String, String>,
    /// Member hosts.
    pub hosts: BTreeSet<String>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last update.
    pub updated_at: Option<Timestamp>,
}

impl Aggregate {
    /// The availability zone this aggregate defines, if any.
    pub fn availability_zone(&self) -> Option<&str> {
        self.metadata.get("availability_zone").map(String::as_str)
    }
}

/// An instance mapping (`instance_mappings`): which cell holds an instance.
/// `cell` is `None` while the instance is only a build request.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceMapping {
    /// Instance id.
    pub instance_uuid: Uuid,
    /// Cell, once scheduled (or buried in cell0).
    pub cell: Option<Uuid>,
    /// Owning project.
    pub project_id: String,
    /// Owning user.
    pub user_id: String,
    /// Being deleted: no longer counted for quota.
    pub queued_for_delete: bool,
    /// Creation time.
    pub created_at: Timestamp,
}

/// What a user asked for one instance: everything a server shows before it
/// exists in a cell, and what its cell row is built from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstanceSpec {
    /// `name`.
    pub display_name: String,
    /// `description` (2.19).
    pub display_description: Option<String>,
    /// Hostname (2.90 shows it).
    pub hostname: String,
    /// Image, if booted from one.
    pub image_ref: Option<Uuid>,
    /// Image properties at boot time (2.98 shows them).
    pub image_properties: BTreeMap<String, String>,
    /// The flavor, copied.
    pub flavor: Flavor,
    /// User metadata.
    pub metadata: BTreeMap<String, String>,
    /// Key pair name.
    pub key_name: Option<String>,
    /// The key pair's public key at boot (Nova's `instance.key_data`):
    /// what the agent injects, and what a rebuild keeps unless given
    /// another key.
    pub key_data: Option<String>,
    /// The availability zone the user asked for.
    pub availability_zone: Option<String>,
    /// `r-xxxxxxxx`, shared by the instances of one request.
    pub reservation_id: String,
    /// Position within a multi-create.
    pub launch_index: i64,
    /// `config_drive`.
    pub config_drive: String,
    /// Base64 user data.
    pub user_data: Option<String>,
    /// `accessIPv4`.
    pub access_ip_v4: Option<String>,
    /// `accessIPv6`.
    pub access_ip_v6: Option<String>,
    /// Tags (2.52 at create).
    pub tags: Vec<String>,
    /// Scheduler hints as given (2.100 shows them).
    pub scheduler_hints: BTreeMap<String, Vec<String>>,
    /// `OS-DCF:diskConfig` is `AUTO` (Nova's `auto_disk_config`).
    pub auto_disk_config: bool,
    /// The security groups' names (Nova: those of the server's ports):
    /// the create's `security_groups`, else `default`; changed by
    /// `addSecurityGroup`/`removeSecurityGroup`.
    pub security_groups: Vec<String>,
    /// The image of the rescue under way or last asked for
    /// (`rescue_image_ref`; `None`: the server's own image).
    pub rescue_image: Option<Uuid>,
    /// NICs asked for: one per network named, one for `auto` (or no
    /// `networks` before 2.37), none for `none`. What a hypervisor driver
    /// gives the guest; berth has no network service behind them.
    pub nics: u32,
}

/// A build request: an instance accepted by the API but not yet in a cell.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildRequest {
    /// Instance id.
    pub instance_uuid: Uuid,
    /// Owning project.
    pub project_id: String,
    /// Owning user.
    pub user_id: String,
    /// What was asked.
    pub spec: InstanceSpec,
    /// Acceptance time (the server's `created`).
    pub created_at: Timestamp,
    /// Held back from scheduling until released (a reserved server
    /// waiting for its lease to start: status `RESERVED`). The conductor
    /// never schedules a held build request; the lease start releases it
    /// (`berth_reservation_model::reserved`).
    pub held: bool,
}

impl BuildRequest {
    /// The `(vm_state, task_state)` a build request shows: `building` /
    /// `scheduling`, or `reserved` with no task while it is held.
    pub fn shown_state(&self) -> (&'static str, Option<&'static str>) {
        if self.held {
            (crate::cell::vm_state::RESERVED, None)
        } else {
            (crate::cell::vm_state::BUILDING, Some(crate::cell::task_state::SCHEDULING))
        }
    }
}

/// The image part of a request spec.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageRef {
    /// Image id.
    pub id: Uuid,
    /// Disk format (image type prefilter).
    pub disk_format: Option<String>,
    /// Properties (`trait:*`, `hw_*`, ...).
    pub properties: BTreeMap<String, String>,
}

/// A request spec (`request_specs`): what the scheduler needs to place
/// one instance, kept for the instance's life (moves re-use it).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    /// Instance id.
    pub instance_uuid: Uuid,
    /// Owning project.
    pub project_id: String,
    /// Owning user.
    pub user_id: String,
    /// Flavor copy.
    pub flavor: Flavor,
    /// Image, if any.
    pub image: Option<ImageRef>,
    /// Instances in the request (multi-create).
    pub num_instances: i64,
    /// Requested availability zone.
    pub availability_zone: Option<String>,
    /// Forced host (`az:host`).
    pub force_host: Option<String>,
    /// Forced node (`az:host:node`).
    pub force_node: Option<String>,
    /// Server group (scheduler hint `group`).
    pub group: Option<Uuid>,
    /// `same_host` hint: instances whose hosts are required.
    pub same_host: Vec<Uuid>,
    /// `different_host` hint: instances whose hosts are excluded.
    pub different_host: Vec<Uuid>,
    /// Every hint as given.
    pub hints: BTreeMap<String, Vec<String>>,
    /// Reservation id of the request.
    pub reservation_id: String,
    /// Build attempts and the alternates left for rescheduling (Nova's
    /// `RequestSpec.retry` plus the `host_list` its conductor hands to the
    /// compute host). Empty until a claim leaves alternates.
    pub retry: BuildRetry,
    /// The public key of the boot's key pair (the instance's `key_data`),
    /// which every process can hand to the agent with the build task.
    pub key_data: Option<String>,
    /// The secret of the instance's current cold move, written by the
    /// move's claim: the destination's agent shows it to the source's to
    /// fetch the disk (both tasks carry it); `None` before any move.
    pub move_token: Option<String>,
}

/// How an instance's build went so far, and where it may go next if it
/// fails. Written by the claim (attempt 1, the scheduler's alternates) and
/// by each reschedule (one more attempt, one alternate fewer), each time in
/// the same control write as the allocations it describes, so the
/// alternates survive a restart and are consumed exactly once.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BuildRetry {
    /// Attempts made (Nova's `retry.num_attempts`); 0 when never recorded,
    /// which means the first attempt.
    pub num_attempts: i64,
    /// Hosts whose build failed, oldest first (Nova's `retry.hosts`).
    pub failed_hosts: Vec<String>,
    /// Alternates not tried yet, best first: the scheduler's choices after
    /// the one claimed, all in the instance's cell.
    pub alternates: Vec<crate::choice::HostChoice>,
    /// Pull mode: when the failed build was put back on its queue (its
    /// allocations released, attempt `num_attempts` waiting for an
    /// agent's claim); `None` when not waiting. Absent in request specs
    /// written before pull mode requeued builds.
    pub requeued_at: Option<crate::Timestamp>,
}

impl BuildRetry {
    /// Attempts made, counting an unrecorded first one.
    pub fn attempts(&self) -> i64 {
        self.num_attempts.max(1)
    }
}
