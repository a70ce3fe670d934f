{
    "hypervisors": [
        {
            "id": "%(hypervisor_id)s",
            "hypervisor_hostname": "fake-mini",
            "status": "enabled",
            "state": "up",
            "servers": [
                {
                    "name": "test_server1",
                    "uuid": "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
                },
                {
                    "name": "test_server2",
                    "uuid": "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"
                }
            ]
        }
    ]
}
