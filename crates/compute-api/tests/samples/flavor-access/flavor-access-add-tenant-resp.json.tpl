{
    "flavor_access": [
        {
            "flavor_id": "%(flavor_id)s",
            "tenant_id": "%(tenant_id)s"
        }
    ]
}
