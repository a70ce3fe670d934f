{
    "service": {
        "binary": "nova-compute",
        "host": "host1",
        "forced_down": true
    }
}
