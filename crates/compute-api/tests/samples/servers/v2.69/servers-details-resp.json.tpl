{
    "servers": [
        {
            "created": "%(isotime)s",
            "id": "%(uuid)s",
            "status": "UNKNOWN",
            "tenant_id": "6f70656e737461636b20342065766572",
            "links": [
                {
                    "href": "%(versioned_compute_endpoint)s/servers/%(uuid)s",
                    "rel": "self"
                },
                {
                    "href": "%(compute_endpoint)s/servers/%(uuid)s",
                    "rel": "bookmark"
                }
            ]
        }
    ]
}
