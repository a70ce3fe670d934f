{
    "hypervisors": [
        {
            "hypervisor_hostname": "fake-mini",
            "id": "%(hypervisor_id)s",
            "state": "up",
            "status": "enabled"
        }
    ]
}
