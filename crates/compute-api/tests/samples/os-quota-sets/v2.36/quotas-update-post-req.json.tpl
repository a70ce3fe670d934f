{
    "quota_set": {
        "instances": 45
    }
}
