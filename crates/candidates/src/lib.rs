//! Allocation-candidate engine: the pure core of `GET /allocation_candidates`.
//!
//! [`find`] takes a placement [`State`] and a typed [`Request`] (request
//! groups plus request-wide parameters) and returns the allocation requests
//! and provider summaries upstream Placement would return, in a deterministic
//! order. It mirrors upstream's `objects/allocation_candidate.py` and
//! `objects/research_context.py`:
//!
//! * every group is resolved independently into per-group allocation
//!   requests, each *anchored* at a root provider;
//! * a suffixed (granular) group is satisfied by exactly one provider; a
//!   sharing provider (trait `MISC_SHARES_VIA_AGGREGATE`) may anchor at any
//!   root that shares one of its aggregates;
//! * the unsuffixed group may be spread over several providers of one tree
//!   plus sharing providers when trees or sharing providers exist anywhere;
//!   its required traits are satisfied collectively by the providers used;
//! * per anchor, one allocation request of every group is combined (group
//!   policy, `same_subtree`, consolidated capacity), then duplicates are
//!   dropped, the pre-1.29 nested filter and the limit are applied;
//! * with [`Request::max_candidates`] set, candidates are generated
//!   breadth-first across anchors (round-robin, one per tree per round)
//!   until the cap, instead of every candidate of one tree before the next.
//!
//! No I/O, no clock: randomisation takes its seed from the caller.
#![deny(missing_docs)]

mod engine;

use berth_model::{Provider, State};
#[doc(hidden)]
pub use engine::find_exhaustive;
pub use engine::{find, find_packed};
use smallvec::SmallVec;
use uuid::Uuid;

/// The trait marking a provider whose inventory is shared via aggregates.
pub const SHARING_TRAIT: &str = "MISC_SHARES_VIA_AGGREGATE";

/// One request group (`resources[S]`, `required[S]`, `member_of[S]`, `in_tree[S]`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestGroup {
    /// Group suffix; empty for the unsuffixed group.
    pub suffix: String,
    /// Requested amounts by resource class, in query order.
    pub resources: Vec<(String, i64)>,
    /// Required traits: all of the inner lists, any trait of each.
    pub required_traits: Vec<Vec<String>>,
    /// Forbidden traits.
    pub forbidden_traits: Vec<String>,
    /// Required aggregates: all of the inner lists, any aggregate of each.
    pub member_of: Vec<Vec<Uuid>>,
    /// Forbidden aggregates.
    pub forbidden_aggregates: Vec<Uuid>,
    /// Restrict the group to the tree of this provider.
    pub in_tree: Option<Uuid>,
}

impl RequestGroup {
    /// Suffixed groups must be satisfied by a single provider.
    pub fn use_same_provider(&self) -> bool {
        !self.suffix.is_empty()
    }
}

/// How suffixed groups relate to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Suffixed groups may share providers.
    None,
    /// Every suffixed group uses a different provider.
    Isolate,
}

/// A whole allocation-candidates request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// Request groups in the order their first parameter appeared.
    pub groups: Vec<RequestGroup>,
    /// `group_policy`, if given.
    pub group_policy: Option<GroupPolicy>,
    /// Maximum number of allocation requests to return.
    pub limit: Option<usize>,
    /// Traits every anchor (root) provider must have (`root_required`).
    pub root_required: Vec<String>,
    /// Traits no anchor (root) provider may have (`root_required=!T`).
    pub root_forbidden: Vec<String>,
    /// `same_subtree` parameters: each a list of group suffixes.
    pub same_subtrees: Vec<Vec<String>>,
    /// Microversion >= 1.29: candidates may use several providers of one tree.
    pub nested_aware: bool,
    /// `randomize_allocation_candidates`: shuffle (or sample, with a limit)
    /// using this seed.
    pub randomize_seed: Option<u64>,
    /// `max_allocation_candidates`: generate at most this many allocation
    /// requests (`None`: unlimited). Generation then goes breadth-first
    /// across anchor trees: one candidate per tree per round, round-robin in
    /// anchor order, so the cap never drops a tree while another gets a
    /// second candidate. `limit` and `randomize_seed` apply to the capped set.
    pub max_candidates: Option<usize>,
    /// Leave `provider_summaries` empty (callers that only claim, such as
    /// the in-process scheduler, do not read them).
    pub skip_summaries: bool,
    /// Start the search at this anchor position (modulo the number of
    /// providers) instead of the first, wrapping around. With a `limit`
    /// the answer is then a window of the cloud that moves from request
    /// to request (the scheduler's sampling, as Kubernetes' rotating start
    /// node); the order of the answer is then the search order.
    pub rotate: Option<u64>,
}

/// Reasons a request is refused (upstream answers 400 for both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CandidatesError {
    /// A requested resource class does not exist.
    ResourceClassNotFound(String),
    /// A named trait does not exist.
    TraitNotFound(String),
}

impl std::fmt::Display for CandidatesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CandidatesError::ResourceClassNotFound(name) => {
                write!(f, "No such resource class {name}.")
            }
            CandidatesError::TraitNotFound(name) => write!(f, "No such trait(s): {name}."),
        }
    }
}

impl std::error::Error for CandidatesError {}

/// One allocation request: what to claim from which provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationRequest<'a> {
    /// Provider -> (resource class, amount), providers in first-use order.
    pub allocations: SmallVec<[(Uuid, Amounts<'a>); 1]>,
    /// Group suffix -> providers satisfying that group (sorted), groups in
    /// request order.
    pub mappings: SmallVec<[(&'a str, Providers); 1]>,
}

/// The providers satisfying one group of a candidate (sorted; inline
/// when one).
pub type Providers = SmallVec<[Uuid; 1]>;

/// One provider's (resource class, amount) pairs of a candidate. The
/// lists of a candidate are inline up to the common sizes (one provider,
/// three classes, one group), so a 10,000-candidate answer does not make
/// 40,000 small heap allocations to describe them.
pub type Amounts<'a> = SmallVec<[(&'a str, i64); 3]>;

/// Capacity and usage of one resource class of a summarised provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryResource<'a> {
    /// Resource class name.
    pub resource_class: &'a str,
    /// `(total - reserved) * allocation_ratio`, truncated.
    pub capacity: i64,
    /// Amount allocated.
    pub used: i64,
}

/// Summary of one provider involved in the candidates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSummary<'a> {
    /// Provider uuid.
    pub uuid: Uuid,
    /// Parent provider, if any.
    pub parent: Option<Uuid>,
    /// Root provider.
    pub root: Uuid,
    /// Every inventory of the provider, by resource class name (inline up
    /// to a compute node's three).
    pub resources: SmallVec<[SummaryResource<'a>; 3]>,
    /// Trait names in trait id order (standard traits first), as upstream
    /// (inline up to four).
    pub traits: SmallVec<[&'a str; 4]>,
}

/// The answer: allocation requests and summaries of the providers involved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Candidates<'a> {
    /// Allocation requests.
    pub allocation_requests: Vec<AllocationRequest<'a>>,
    /// Provider summaries, in provider creation order.
    pub provider_summaries: Vec<ProviderSummary<'a>>,
    /// The `max_candidates` cap was reached, so viable candidates beyond it
    /// were not generated (the API counts this in a metric).
    pub capped: bool,
}

/// The answer in positional form ([`find_packed`]): providers by position
/// in [`Answer::uuids`], classes by id in [`Answer::classes`]. Converted
/// by [`Answer::to_candidates`]; written straight out by the API.
#[derive(Debug, Clone)]
pub struct Answer<'a> {
    pub(crate) state: &'a State,
    /// Provider uuids by position.
    pub uuids: &'a [Uuid],
    /// Resource class names by class id.
    pub classes: Vec<&'a str>,
    /// Group suffixes in request order.
    pub suffixes: Vec<&'a str>,
    /// The allocation requests.
    pub requests: Vec<PackedRequest>,
    /// The providers to summarise, in creation order (their summaries:
    /// [`Answer::summaries`]).
    pub summarised: Vec<&'a Provider>,
    /// See [`Candidates::capped`].
    pub capped: bool,
}

/// One allocation request in positional form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedRequest {
    /// (provider position, class id, amount), in first-use order (so the
    /// providers of [`AllocationRequest::allocations`] are in the order
    /// they first appear here).
    pub amounts: SmallVec<[(u32, u16, i64); 3]>,
    /// Per group (request order), the positions of the providers
    /// satisfying it, in uuid order.
    pub mappings: SmallVec<[Positions; 1]>,
}

/// Provider positions (inline when one).
pub type Positions = SmallVec<[u32; 1]>;
