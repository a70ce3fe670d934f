{
    "server_group": {
        "name": "%(name)s",
        "policy": "anti-affinity",
        "rules": {"max_server_per_host": 3}
    }
}
