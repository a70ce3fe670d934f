{
    "addTenantAccess": {
        "tenant": "%(tenant_id)s"
    }
}
