{
    "aggregate": {
        "availability_zone": "london",
        "created_at": "%(strtime)s",
        "deleted": false,
        "deleted_at": null,
        "hosts": [],
        "id": 1,
        "metadata": {
            "availability_zone": "london",
            "key": "value"
        },
        "name": "name",
        "updated_at": %(strtime)s
    }
}
