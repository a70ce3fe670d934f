{
    "server_group": {
        "name": "%(name)s",
        "policies": ["anti-affinity"]
    }
}
