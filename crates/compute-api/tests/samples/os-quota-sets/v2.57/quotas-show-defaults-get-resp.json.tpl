{
    "quota_set": {
        "cores": 20,
        "id": "fake_tenant",
        "instances": 10,
        "key_pairs": 100,
        "metadata_items": 128,
        "ram": 51200,
        "server_groups": 10,
        "server_group_members": 10
    }
}
