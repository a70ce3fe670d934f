{
    "versions": [
        {
            "id": "v2.0",
            "links": [
                {
                    "href": "%(host)s/v2/",
                    "rel": "self"
                }
            ],
            "status": "DEPRECATED",
            "version": "",
            "min_version": "",
            "updated": "2025-07-04T12:00:00Z"
        },
        {
            "id": "v2.1",
            "links": [
                {
                    "href": "%(host)s/v2.1/",
                    "rel": "self"
                }
            ],
            "status": "CURRENT",
            "version": "%(max_api_version)s",
            "min_version": "2.1",
            "updated": "2013-07-23T11:33:21Z"
        }
    ]
}
