{
    "hypervisors": [
        {
            "id": "%(hypervisor_id)s",
            "state": "up",
            "status": "enabled",
            "hypervisor_hostname": "fake-mini"
        }
    ]
}
