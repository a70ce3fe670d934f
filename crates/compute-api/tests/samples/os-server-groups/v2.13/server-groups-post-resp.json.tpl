{
    "server_group": {
        "id": "%(id)s",
        "name": "%(name)s",
        "policies": ["anti-affinity"],
        "members": [],
        "metadata": {},
        "project_id": "6f70656e737461636b20342065766572",
        "user_id": "fake"
    }
}
