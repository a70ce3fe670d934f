{
    "quota_set": {
        "instances": 9
    }
}
