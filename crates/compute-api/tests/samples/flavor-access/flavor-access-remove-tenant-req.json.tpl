{
    "removeTenantAccess": {
        "tenant": "%(tenant_id)s"
    }
}
