{
    "quota_set": {
        "cores": 45
    }
}
