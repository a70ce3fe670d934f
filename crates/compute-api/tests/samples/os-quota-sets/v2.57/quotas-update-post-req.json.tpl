{
    "quota_set": {
        "instances": 20
    }
}
