{
    "server_group": {
        "id": "%(id)s",
        "name": "%(name)s",
        "policies": ["anti-affinity"],
        "members": [],
        "metadata": {}
    }
}
