{
    "service": {
        "binary": "nova-compute",
        "host": "host1",
        "status": "enabled"
    }
}