{
    "hypervisors": [
        {
            "hypervisor_hostname": "fake-mini",
            "state": "up",
            "status": "enabled",
            "id": 1
        }
    ]
}
