{
    "hypervisors": [
        {
            "id": "%(hypervisor_id)s",
            "hypervisor_hostname": "fake-mini",
            "status": "enabled",
            "state": "up"
        }
    ]
}
