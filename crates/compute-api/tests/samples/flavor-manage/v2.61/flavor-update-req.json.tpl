{
    "flavor": {
        "description": "updated description"
    }
}
