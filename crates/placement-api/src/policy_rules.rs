//! Placement's policy rules: upstream's names, new defaults and deprecated
//! defaults (`enforce_new_defaults = False`, what upstream's own functional
//! tests run).

use berth_http::policy::RuleTable;

/// (name, new default, deprecated default) of every rule upstream registers.
pub const RULES: &RuleTable = &[
    ("admin_api", "role:admin", None),
    ("service_api", "role:service", Some("role:admin")),
    ("admin_or_service_api", "role:admin or role:service", Some("role:admin")),
    ("project_reader_api", "role:reader and project_id:%(project_id)s", Some("role:admin")),
    (
        "admin_or_project_reader_or_service_api",
        "role:admin or rule:project_reader_api or role:service",
        Some("role:admin"),
    ),
    ("placement:resource_providers:list", "rule:admin_or_service_api", None),
    ("placement:resource_providers:create", "rule:admin_or_service_api", None),
    ("placement:resource_providers:show", "rule:admin_or_service_api", None),
    ("placement:resource_providers:update", "rule:admin_or_service_api", None),
    ("placement:resource_providers:delete", "rule:admin_or_service_api", None),
    ("placement:resource_classes:list", "rule:admin_or_service_api", None),
    ("placement:resource_classes:create", "rule:admin_or_service_api", None),
    ("placement:resource_classes:show", "rule:admin_or_service_api", None),
    ("placement:resource_classes:update", "rule:admin_or_service_api", None),
    ("placement:resource_classes:delete", "rule:admin_or_service_api", None),
    ("placement:resource_providers:inventories:list", "rule:admin_or_service_api", None),
    ("placement:resource_providers:inventories:create", "rule:admin_or_service_api", None),
    ("placement:resource_providers:inventories:show", "rule:admin_or_service_api", None),
    ("placement:resource_providers:inventories:update", "rule:admin_or_service_api", None),
    ("placement:resource_providers:inventories:delete", "rule:admin_or_service_api", None),
    ("placement:resource_providers:aggregates:list", "rule:admin_or_service_api", None),
    ("placement:resource_providers:aggregates:update", "rule:admin_or_service_api", None),
    ("placement:resource_providers:usages", "rule:admin_or_service_api", None),
    ("placement:usages", "rule:admin_or_project_reader_or_service_api", None),
    ("placement:traits:list", "rule:admin_or_service_api", None),
    ("placement:traits:show", "rule:admin_or_service_api", None),
    ("placement:traits:update", "rule:admin_or_service_api", None),
    ("placement:traits:delete", "rule:admin_or_service_api", None),
    ("placement:resource_providers:traits:list", "rule:admin_or_service_api", None),
    ("placement:resource_providers:traits:update", "rule:admin_or_service_api", None),
    ("placement:resource_providers:traits:delete", "rule:admin_or_service_api", None),
    ("placement:allocations:manage", "rule:admin_or_service_api", None),
    ("placement:allocations:list", "rule:admin_or_service_api", None),
    ("placement:allocations:update", "rule:admin_or_service_api", None),
    ("placement:allocations:delete", "rule:admin_or_service_api", None),
    ("placement:resource_providers:allocations:list", "rule:admin_or_service_api", None),
    ("placement:allocation_candidates:list", "rule:admin_or_service_api", None),
    ("placement:reshaper:reshape", "rule:service_api", None),
];
