//! `ComputeState`: the compute half of the control database in memory, and
//! `ComputeChange`, the row-level changes that are the only way it changes.
//!
//! Compute rows carry no generations: every control write is planned by one
//! writer at a time against a snapshot that has caught up with the
//! database (see `berth-core`'s write path), so a plan is never stale.
//! Uniqueness (names, ids) is checked by the plans against that snapshot.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::lease::{Lease, LeaseTables, ReservableHost, ResourceProperty};
use crate::{
    AgentCredential, Aggregate, BuildRequest, CellMapping, ComputeNodeRef, Flavor, HostMapping, Image, InstanceMapping,
    KeyPair, MetadefNamespace, RequestSpec, ServerGroup,
};

/// One row-level change to the compute control tables.
#[derive(Debug, Clone, PartialEq)]
pub enum ComputeChange {
    /// Insert or replace a flavor (by `flavorid`).
    PutFlavor(Flavor),
    /// Delete a flavor.
    DeleteFlavor(String),
    /// Insert or replace an image.
    PutImage(Image),
    /// Delete an image.
    DeleteImage(Uuid),
    /// Insert or replace a server group (with its members).
    PutServerGroup(ServerGroup),
    /// Delete a server group.
    DeleteServerGroup(Uuid),
    /// Insert or replace a cell mapping.
    PutCell(CellMapping),
    /// Delete a cell mapping.
    DeleteCell(Uuid),
    /// Insert or replace a host mapping.
    PutHostMapping(HostMapping),
    /// Delete a host mapping.
    DeleteHostMapping(String),
    /// Insert or replace a host's agent credential.
    PutAgentCredential(AgentCredential),
    /// Delete a host's agent credential.
    DeleteAgentCredential(String),
    /// Insert or replace a compute-node reference.
    PutComputeNode(ComputeNodeRef),
    /// Delete a compute-node reference.
    DeleteComputeNode(Uuid),
    /// Insert or replace an instance mapping.
    PutInstanceMapping(InstanceMapping),
    /// Delete an instance mapping.
    DeleteInstanceMapping(Uuid),
    /// Insert or replace a build request.
    PutBuildRequest(BuildRequest),
    /// Delete a build request.
    DeleteBuildRequest(Uuid),
    /// Insert or replace a request spec.
    PutRequestSpec(RequestSpec),
    /// Delete a request spec.
    DeleteRequestSpec(Uuid),
    /// Set a quota limit: `(project, user or "", resource) = limit`.
    PutQuota {
        /// Project.
        project_id: String,
        /// User ("" for the project-wide limit).
        user_id: String,
        /// Resource name.
        resource: String,
        /// Hard limit (-1 unlimited).
        limit: i64,
    },
    /// Remove a quota override.
    DeleteQuota {
        /// Project.
        project_id: String,
        /// User ("" for the project-wide limit).
        user_id: String,
        /// Resource name.
        resource: String,
    },
    /// Set a quota-class limit (`default` gives the defaults).
    PutQuotaClass {
        /// Class name.
        class_name: String,
        /// Resource name.
        resource: String,
        /// Hard limit.
        limit: i64,
    },
    /// Insert or replace a host aggregate.
    PutAggregate(Aggregate),
    /// Delete a host aggregate.
    DeleteAggregate(i64),
    /// Enrol or update a reservable host.
    PutReservableHost(ReservableHost),
    /// Remove a reservable host.
    DeleteReservableHost(i64),
    /// Insert or replace a lease (with its reservations and events).
    PutLease(Lease),
    /// Delete a lease.
    DeleteLease(Uuid),
    /// Insert or replace a resource property's settings.
    PutResourceProperty(ResourceProperty),
    /// Remove a resource property.
    DeleteResourceProperty(String, String),
    /// Insert or replace a key pair (by user and name).
    PutKeyPair(KeyPair),
    /// Delete a key pair: `(user, name)`.
    DeleteKeyPair(String, String),
    /// Insert or replace a Glance metadef namespace (by name).
    PutMetadefNamespace(MetadefNamespace),
    /// Delete a metadef namespace by name.
    DeleteMetadefNamespace(String),
}

/// The identity of the row a change touches (what the store keys rows by,
/// and what undo restores).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RowKey {
    /// A flavor by flavorid.
    Flavor(String),
    /// An image.
    Image(Uuid),
    /// A server group.
    ServerGroup(Uuid),
    /// A cell.
    Cell(Uuid),
    /// A host mapping.
    HostMapping(String),
    /// A host's agent credential.
    AgentCredential(String),
    /// A compute-node reference.
    ComputeNode(Uuid),
    /// An instance mapping.
    InstanceMapping(Uuid),
    /// A build request.
    BuildRequest(Uuid),
    /// A request spec.
    RequestSpec(Uuid),
    /// A quota `(project, user, resource)`.
    Quota(String, String, String),
    /// A quota class `(class, resource)`.
    QuotaClass(String, String),
    /// A host aggregate.
    Aggregate(i64),
    /// A reservable host.
    ReservableHost(i64),
    /// A lease.
    Lease(Uuid),
    /// A resource property `(resource_type, name)`.
    ResourceProperty(String, String),
    /// A key pair `(user, name)`.
    KeyPair(String, String),
    /// A Glance metadef namespace by name.
    MetadefNamespace(String),
}

impl ComputeChange {
    /// The row this change touches.
    pub fn key(&self) -> RowKey {
        use ComputeChange as C;
        match self {
            C::PutFlavor(f) => RowKey::Flavor(f.flavorid.clone()),
            C::DeleteFlavor(id) => RowKey::Flavor(id.clone()),
            C::PutImage(i) => RowKey::Image(i.id),
            C::DeleteImage(id) => RowKey::Image(*id),
            C::PutServerGroup(g) => RowKey::ServerGroup(g.uuid),
            C::DeleteServerGroup(id) => RowKey::ServerGroup(*id),
            C::PutCell(c) => RowKey::Cell(c.uuid),
            C::DeleteCell(id) => RowKey::Cell(*id),
            C::PutHostMapping(h) => RowKey::HostMapping(h.host.clone()),
            C::DeleteHostMapping(h) => RowKey::HostMapping(h.clone()),
            C::PutAgentCredential(c) => RowKey::AgentCredential(c.host.clone()),
            C::DeleteAgentCredential(h) => RowKey::AgentCredential(h.clone()),
            C::PutComputeNode(n) => RowKey::ComputeNode(n.uuid),
            C::DeleteComputeNode(id) => RowKey::ComputeNode(*id),
            C::PutInstanceMapping(m) => RowKey::InstanceMapping(m.instance_uuid),
            C::DeleteInstanceMapping(id) => RowKey::InstanceMapping(*id),
            C::PutBuildRequest(b) => RowKey::BuildRequest(b.instance_uuid),
            C::DeleteBuildRequest(id) => RowKey::BuildRequest(*id),
            C::PutRequestSpec(s) => RowKey::RequestSpec(s.instance_uuid),
            C::DeleteRequestSpec(id) => RowKey::RequestSpec(*id),
            C::PutQuota { project_id, user_id, resource, .. } | C::DeleteQuota { project_id, user_id, resource } => {
                RowKey::Quota(project_id.clone(), user_id.clone(), resource.clone())
            }
            C::PutQuotaClass { class_name, resource, .. } => RowKey::QuotaClass(class_name.clone(), resource.clone()),
            C::PutAggregate(a) => RowKey::Aggregate(a.id),
            C::DeleteAggregate(id) => RowKey::Aggregate(*id),
            C::PutReservableHost(h) => RowKey::ReservableHost(h.id),
            C::DeleteReservableHost(id) => RowKey::ReservableHost(*id),
            C::PutLease(l) => RowKey::Lease(l.id),
            C::DeleteLease(id) => RowKey::Lease(*id),
            C::PutResourceProperty(p) => RowKey::ResourceProperty(p.resource_type.clone(), p.name.clone()),
            C::DeleteResourceProperty(t, n) => RowKey::ResourceProperty(t.clone(), n.clone()),
            C::PutKeyPair(k) => RowKey::KeyPair(k.user_id.clone(), k.name.clone()),
            C::DeleteKeyPair(u, n) => RowKey::KeyPair(u.clone(), n.clone()),
            C::PutMetadefNamespace(m) => RowKey::MetadefNamespace(m.namespace.clone()),
            C::DeleteMetadefNamespace(n) => RowKey::MetadefNamespace(n.clone()),
        }
    }
}

/// cores and RAM counted for quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// vCPUs (VCPU + PCPU).
    pub cores: i64,
    /// RAM in MiB.
    pub ram: i64,
}

impl Counted {
    fn add(&mut self, other: Counted, sign: i64) {
        self.cores += sign * other.cores;
        self.ram += sign * other.ram;
    }
}

/// The compute control tables in memory, with derived indexes.
#[derive(Debug, Clone, Default)]
pub struct ComputeState {
    /// Flavors by flavorid.
    pub flavors: BTreeMap<String, Flavor>,
    /// Images by id.
    pub images: BTreeMap<Uuid, Image>,
    /// Server groups by id.
    pub server_groups: BTreeMap<Uuid, ServerGroup>,
    /// Cell mappings by id.
    pub cells: BTreeMap<Uuid, CellMapping>,
    /// Host mappings by host.
    pub host_mappings: BTreeMap<String, HostMapping>,
    /// Agent credentials by host.
    pub agent_credentials: BTreeMap<String, AgentCredential>,
    /// Compute-node references by node uuid (= root provider uuid).
    pub compute_nodes: HashMap<Uuid, ComputeNodeRef>,
    /// Instance mappings by instance.
    pub instance_mappings: HashMap<Uuid, InstanceMapping>,
    /// Build requests by instance.
    pub build_requests: HashMap<Uuid, BuildRequest>,
    /// Request specs by instance.
    pub request_specs: HashMap<Uuid, RequestSpec>,
    /// Quota overrides `(project, user or "", resource) -> limit`.
    pub quotas: BTreeMap<(String, String, String), i64>,
    /// Quota classes `(class, resource) -> limit`.
    pub quota_classes: BTreeMap<(String, String), i64>,
    /// Host aggregates by id.
    pub aggregates: BTreeMap<i64, Aggregate>,
    /// Reservations (Blazar): enrolled hosts, leases, properties.
    pub leases: LeaseTables,
    /// Highest flavor id handed out.
    pub max_flavor_id: i64,
    /// Highest aggregate id handed out.
    pub max_aggregate_id: i64,
    /// Key pairs by `(user, name)` (so a user's are listed by name).
    pub key_pairs: BTreeMap<(String, String), KeyPair>,
    /// Highest key pair id handed out.
    pub max_key_pair_id: i64,
    /// Glance metadef namespaces by name.
    pub metadef_namespaces: BTreeMap<String, MetadefNamespace>,

    /// Derived: the group each instance belongs to.
    pub group_of_instance: HashMap<Uuid, Uuid>,
    /// Derived: node uuids per host.
    pub nodes_by_host: HashMap<String, Vec<Uuid>>,
    /// Derived: counted instance mappings per project and per
    /// `(project, user)` (not queued for delete).
    instances_by_project: HashMap<String, i64>,
    instances_by_user: HashMap<(String, String), i64>,
    /// Derived: cores/RAM of pending build requests.
    pending_by_project: HashMap<String, Counted>,
    pending_by_user: HashMap<(String, String), Counted>,
    /// Derived, maintained by [`crate::World::apply`]: placement usage of
    /// `INSTANCE` consumers.
    pub(crate) placed_by_project: HashMap<String, Counted>,
    pub(crate) placed_by_user: HashMap<(String, String), Counted>,
    /// Derived: changes whenever a host mapping or an agent credential
    /// does (who may speak for a host), so a check of those can be
    /// remembered until then ([`OwnersEpoch`]).
    pub owners_epoch: OwnersEpoch,
}

/// A value no other state of host bindings in this process had: every
/// state starts with a fresh one, and every change to a host mapping or
/// an agent credential takes another. Equal epochs mean the same
/// bindings (of the same state, or of a clone of it untouched since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnersEpoch(u64);

static NEXT_OWNERS_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl OwnersEpoch {
    fn fresh() -> Self {
        OwnersEpoch(NEXT_OWNERS_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Default for OwnersEpoch {
    fn default() -> Self {
        Self::fresh()
    }
}

fn bump<K: std::hash::Hash + Eq>(map: &mut HashMap<K, i64>, key: K, by: i64) {
    let entry = map.entry(key).or_insert(0);
    *entry += by;
}

fn bump_counted<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Counted>, key: K, by: Counted, sign: i64) {
    map.entry(key).or_default().add(by, sign);
}

impl ComputeState {
    /// Counted instances of a project (or of a user within it).
    pub fn instance_count(&self, project: &str, user: Option<&str>) -> i64 {
        match user {
            None => self.instances_by_project.get(project).copied().unwrap_or(0),
            Some(u) => self.instances_by_user.get(&(project.to_owned(), u.to_owned())).copied().unwrap_or(0),
        }
    }

    /// Counted cores and RAM of a project (or user): placed plus pending.
    pub fn counted(&self, project: &str, user: Option<&str>) -> Counted {
        let mut out = Counted::default();
        match user {
            None => {
                if let Some(c) = self.placed_by_project.get(project) {
                    out.add(*c, 1);
                }
                if let Some(c) = self.pending_by_project.get(project) {
                    out.add(*c, 1);
                }
            }
            Some(u) => {
                let key = (project.to_owned(), u.to_owned());
                if let Some(c) = self.placed_by_user.get(&key) {
                    out.add(*c, 1);
                }
                if let Some(c) = self.pending_by_user.get(&key) {
                    out.add(*c, 1);
                }
            }
        }
        out
    }

    /// Account placement usage of an `INSTANCE` consumer (`sign` +1 when
    /// it appears, -1 when it goes).
    pub(crate) fn account_placed(&mut self, project: &str, user: &str, counted: Counted, sign: i64) {
        bump_counted(&mut self.placed_by_project, project.to_owned(), counted, sign);
        bump_counted(&mut self.placed_by_user, (project.to_owned(), user.to_owned()), counted, sign);
    }

    /// The key pairs of `user`, by name.
    pub fn key_pairs_of<'a>(&'a self, user: &'a str) -> impl Iterator<Item = &'a KeyPair> + 'a {
        self.key_pairs
            .range((user.to_owned(), String::new())..)
            .take_while(move |((u, _), _)| u == user)
            .map(|(_, k)| k)
    }

    /// The cell a host is mapped to.
    pub fn cell_of_host(&self, host: &str) -> Option<Uuid> {
        self.host_mappings.get(host).map(|h| h.cell)
    }

    /// The aggregates a host belongs to.
    pub fn aggregates_of_host<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a Aggregate> + 'a {
        self.aggregates.values().filter(move |a| a.hosts.contains(host))
    }

    /// The availability zone of a host: the zone of its aggregates, joined
    /// with `,` when several, else `default_az`.
    pub fn availability_zone_of_host(&self, host: &str, default_az: &str) -> String {
        let mut zones: Vec<&str> = self.aggregates_of_host(host).filter_map(|a| a.availability_zone()).collect();
        zones.sort_unstable();
        zones.dedup();
        if zones.is_empty() {
            default_az.to_owned()
        } else {
            zones.join(",")
        }
    }

    /// The current row for `key`, as the change that would restore it (or
    /// `None` when the row does not exist).
    pub fn row(&self, key: &RowKey) -> Option<ComputeChange> {
        use ComputeChange as C;
        match key {
            RowKey::Flavor(id) => self.flavors.get(id).cloned().map(C::PutFlavor),
            RowKey::Image(id) => self.images.get(id).cloned().map(C::PutImage),
            RowKey::ServerGroup(id) => self.server_groups.get(id).cloned().map(C::PutServerGroup),
            RowKey::Cell(id) => self.cells.get(id).cloned().map(C::PutCell),
            RowKey::HostMapping(h) => self.host_mappings.get(h).cloned().map(C::PutHostMapping),
            RowKey::AgentCredential(h) => self.agent_credentials.get(h).cloned().map(C::PutAgentCredential),
            RowKey::ComputeNode(id) => self.compute_nodes.get(id).cloned().map(C::PutComputeNode),
            RowKey::InstanceMapping(id) => self.instance_mappings.get(id).cloned().map(C::PutInstanceMapping),
            RowKey::BuildRequest(id) => self.build_requests.get(id).cloned().map(C::PutBuildRequest),
            RowKey::RequestSpec(id) => self.request_specs.get(id).cloned().map(C::PutRequestSpec),
            RowKey::Quota(p, u, r) => self.quotas.get(&(p.clone(), u.clone(), r.clone())).map(|limit| C::PutQuota {
                project_id: p.clone(),
                user_id: u.clone(),
                resource: r.clone(),
                limit: *limit,
            }),
            RowKey::QuotaClass(c, r) => self.quota_classes.get(&(c.clone(), r.clone())).map(|limit| C::PutQuotaClass {
                class_name: c.clone(),
                resource: r.clone(),
                limit: *limit,
            }),
            RowKey::Aggregate(id) => self.aggregates.get(id).cloned().map(C::PutAggregate),
            RowKey::ReservableHost(id) => self.leases.hosts.get(id).cloned().map(C::PutReservableHost),
            RowKey::Lease(id) => self.leases.leases.get(id).cloned().map(C::PutLease),
            RowKey::ResourceProperty(t, n) => {
                self.leases.properties.get(&(t.clone(), n.clone())).cloned().map(C::PutResourceProperty)
            }
            RowKey::KeyPair(u, n) => self.key_pairs.get(&(u.clone(), n.clone())).cloned().map(C::PutKeyPair),
            RowKey::MetadefNamespace(n) => self.metadef_namespaces.get(n).cloned().map(C::PutMetadefNamespace),
        }
    }

    /// The change that deletes the row `key`.
    pub fn delete_of(key: &RowKey) -> ComputeChange {
        use ComputeChange as C;
        match key.clone() {
            RowKey::Flavor(id) => C::DeleteFlavor(id),
            RowKey::Image(id) => C::DeleteImage(id),
            RowKey::ServerGroup(id) => C::DeleteServerGroup(id),
            RowKey::Cell(id) => C::DeleteCell(id),
            RowKey::HostMapping(h) => C::DeleteHostMapping(h),
            RowKey::AgentCredential(h) => C::DeleteAgentCredential(h),
            RowKey::ComputeNode(id) => C::DeleteComputeNode(id),
            RowKey::InstanceMapping(id) => C::DeleteInstanceMapping(id),
            RowKey::BuildRequest(id) => C::DeleteBuildRequest(id),
            RowKey::RequestSpec(id) => C::DeleteRequestSpec(id),
            RowKey::Quota(project_id, user_id, resource) => C::DeleteQuota { project_id, user_id, resource },
            // Quota classes are never deleted, only reset; restoring an
            // absent class row means setting the built-in default back.
            RowKey::QuotaClass(class_name, resource) => {
                let limit = crate::quota::RESOURCES.iter().find(|(r, _)| *r == resource).map_or(-1, |(_, d)| *d);
                C::PutQuotaClass { class_name, resource, limit }
            }
            RowKey::Aggregate(id) => C::DeleteAggregate(id),
            RowKey::ReservableHost(id) => C::DeleteReservableHost(id),
            RowKey::Lease(id) => C::DeleteLease(id),
            RowKey::ResourceProperty(t, n) => C::DeleteResourceProperty(t, n),
            RowKey::KeyPair(u, n) => C::DeleteKeyPair(u, n),
            RowKey::MetadefNamespace(n) => C::DeleteMetadefNamespace(n),
        }
    }

    /// Apply one change (only through [`crate::World::apply`]).
    pub(crate) fn apply_one(&mut self, change: &ComputeChange) {
        use ComputeChange as C;
        match change {
            C::PutFlavor(f) => {
                self.max_flavor_id = self.max_flavor_id.max(f.id);
                self.flavors.insert(f.flavorid.clone(), f.clone());
            }
            C::DeleteFlavor(id) => {
                self.flavors.remove(id);
            }
            C::PutImage(i) => {
                self.images.insert(i.id, i.clone());
            }
            C::DeleteImage(id) => {
                self.images.remove(id);
            }
            C::PutServerGroup(g) => {
                self.remove_group(&g.uuid);
                for member in &g.members {
                    self.group_of_instance.insert(*member, g.uuid);
                }
                self.server_groups.insert(g.uuid, g.clone());
            }
            C::DeleteServerGroup(id) => self.remove_group(id),
            C::PutCell(c) => {
                self.cells.insert(c.uuid, c.clone());
            }
            C::DeleteCell(id) => {
                self.cells.remove(id);
            }
            C::PutHostMapping(h) => {
                self.owners_epoch = OwnersEpoch::fresh();
                self.host_mappings.insert(h.host.clone(), h.clone());
            }
            C::DeleteHostMapping(h) => {
                self.owners_epoch = OwnersEpoch::fresh();
                self.host_mappings.remove(h);
            }
            C::PutAgentCredential(c) => {
                self.owners_epoch = OwnersEpoch::fresh();
                self.agent_credentials.insert(c.host.clone(), c.clone());
            }
            C::DeleteAgentCredential(h) => {
                self.owners_epoch = OwnersEpoch::fresh();
                self.agent_credentials.remove(h);
            }
            C::PutComputeNode(n) => {
                self.remove_node(&n.uuid);
                self.nodes_by_host.entry(n.host.clone()).or_default().push(n.uuid);
                self.compute_nodes.insert(n.uuid, n.clone());
            }
            C::DeleteComputeNode(id) => self.remove_node(id),
            C::PutInstanceMapping(m) => {
                self.remove_mapping(&m.instance_uuid);
                if !m.queued_for_delete {
                    bump(&mut self.instances_by_project, m.project_id.clone(), 1);
                    bump(&mut self.instances_by_user, (m.project_id.clone(), m.user_id.clone()), 1);
                }
                self.instance_mappings.insert(m.instance_uuid, m.clone());
            }
            C::DeleteInstanceMapping(id) => self.remove_mapping(id),
            C::PutBuildRequest(b) => {
                self.remove_build_request(&b.instance_uuid);
                let counted = Counted { cores: b.spec.flavor.vcpus, ram: b.spec.flavor.memory_mb };
                bump_counted(&mut self.pending_by_project, b.project_id.clone(), counted, 1);
                bump_counted(&mut self.pending_by_user, (b.project_id.clone(), b.user_id.clone()), counted, 1);
                self.build_requests.insert(b.instance_uuid, b.clone());
            }
            C::DeleteBuildRequest(id) => self.remove_build_request(id),
            C::PutRequestSpec(s) => {
                self.remove_request_spec(&s.instance_uuid);
                // A failed build back on its pull queue holds no
                // allocations: it counts as pending, as a build request.
                if s.retry.requeued_at.is_some() {
                    self.account_requeued(s, 1);
                }
                self.request_specs.insert(s.instance_uuid, s.clone());
            }
            C::DeleteRequestSpec(id) => self.remove_request_spec(id),
            C::PutQuota { project_id, user_id, resource, limit } => {
                self.quotas.insert((project_id.clone(), user_id.clone(), resource.clone()), *limit);
            }
            C::DeleteQuota { project_id, user_id, resource } => {
                self.quotas.remove(&(project_id.clone(), user_id.clone(), resource.clone()));
            }
            C::PutQuotaClass { class_name, resource, limit } => {
                self.quota_classes.insert((class_name.clone(), resource.clone()), *limit);
            }
            C::PutAggregate(a) => {
                self.max_aggregate_id = self.max_aggregate_id.max(a.id);
                self.aggregates.insert(a.id, a.clone());
            }
            C::DeleteAggregate(id) => {
                self.aggregates.remove(id);
            }
            C::PutReservableHost(h) => self.leases.put_host(h),
            C::DeleteReservableHost(id) => self.leases.delete_host(*id),
            C::PutLease(l) => self.leases.put_lease(l),
            C::DeleteLease(id) => self.leases.delete_lease(*id),
            C::PutResourceProperty(p) => {
                self.leases.properties.insert((p.resource_type.clone(), p.name.clone()), p.clone());
            }
            C::DeleteResourceProperty(t, n) => {
                self.leases.properties.remove(&(t.clone(), n.clone()));
            }
            C::PutKeyPair(k) => {
                self.max_key_pair_id = self.max_key_pair_id.max(k.id);
                self.key_pairs.insert((k.user_id.clone(), k.name.clone()), k.clone());
            }
            C::DeleteKeyPair(u, n) => {
                self.key_pairs.remove(&(u.clone(), n.clone()));
            }
            C::PutMetadefNamespace(m) => {
                self.metadef_namespaces.insert(m.namespace.clone(), m.clone());
            }
            C::DeleteMetadefNamespace(n) => {
                self.metadef_namespaces.remove(n);
            }
        }
    }

    fn remove_group(&mut self, id: &Uuid) {
        if let Some(old) = self.server_groups.remove(id) {
            for member in &old.members {
                if self.group_of_instance.get(member) == Some(id) {
                    self.group_of_instance.remove(member);
                }
            }
        }
    }

    fn remove_node(&mut self, id: &Uuid) {
        if let Some(old) = self.compute_nodes.remove(id) {
            if let Some(list) = self.nodes_by_host.get_mut(&old.host) {
                list.retain(|n| n != id);
                if list.is_empty() {
                    self.nodes_by_host.remove(&old.host);
                }
            }
        }
    }

    fn remove_mapping(&mut self, id: &Uuid) {
        if let Some(old) = self.instance_mappings.remove(id) {
            if !old.queued_for_delete {
                bump(&mut self.instances_by_project, old.project_id.clone(), -1);
                bump(&mut self.instances_by_user, (old.project_id, old.user_id), -1);
            }
        }
    }

    fn remove_request_spec(&mut self, id: &Uuid) {
        if let Some(old) = self.request_specs.remove(id) {
            if old.retry.requeued_at.is_some() {
                self.account_requeued(&old, -1);
            }
        }
    }

    fn account_requeued(&mut self, spec: &RequestSpec, sign: i64) {
        let counted = Counted { cores: spec.flavor.vcpus, ram: spec.flavor.memory_mb };
        bump_counted(&mut self.pending_by_project, spec.project_id.clone(), counted, sign);
        bump_counted(&mut self.pending_by_user, (spec.project_id.clone(), spec.user_id.clone()), counted, sign);
    }

    fn remove_build_request(&mut self, id: &Uuid) {
        if let Some(old) = self.build_requests.remove(id) {
            let counted = Counted { cores: old.spec.flavor.vcpus, ram: old.spec.flavor.memory_mb };
            bump_counted(&mut self.pending_by_project, old.project_id.clone(), counted, -1);
            bump_counted(&mut self.pending_by_user, (old.project_id, old.user_id), counted, -1);
        }
    }
}
