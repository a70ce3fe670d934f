{
    "version": {
        "id": "v2.1",
        "links": [
            {
                "href": "%(host)s/v2.1/",
                "rel": "self"
            },
            {
                "href": "http://docs.openstack.org/",
                "rel": "describedby",
                "type": "text/html"
            }
        ],
        "media-types": [
            {
                "base": "application/json",
                "type": "application/vnd.openstack.compute+json;version=2.1"
            }
        ],
        "status": "CURRENT",
        "version": "%(max_api_version)s",
        "min_version": "2.1",
        "updated": "2013-07-23T11:33:21Z"
    }
}
