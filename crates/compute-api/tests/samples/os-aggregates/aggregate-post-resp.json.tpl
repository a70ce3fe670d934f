{
    "aggregate": {
        "availability_zone": "london",
        "created_at": "%(strtime)s",
        "deleted": false,
        "deleted_at": null,
        "id": %(aggregate_id)s,
        "name": "name",
        "updated_at": null
    }
}
