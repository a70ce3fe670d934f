{
    "flavor": {
        "name": "%(flavor_name)s",
        "ram": 1024,
        "vcpus": 2,
        "disk": 10,
        "id": "%(flavor_id)s",
        "description": "test description"
    }
}
