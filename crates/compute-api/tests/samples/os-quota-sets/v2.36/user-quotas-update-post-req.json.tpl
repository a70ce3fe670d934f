{
    "quota_set": {
        "force": "True",
        "instances": 9
    }
}
