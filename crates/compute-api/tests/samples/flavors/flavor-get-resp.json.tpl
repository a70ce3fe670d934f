{
    "flavor": {
        "disk": 1,
        "id": "1",
        "links": [
            {
                "href": "%(versioned_compute_endpoint)s/flavors/1",
                "rel": "self"
            },
            {
                "href": "%(compute_endpoint)s/flavors/1",
                "rel": "bookmark"
            }
        ],
        "name": "m1.tiny",
        "os-flavor-access:is_public": true,
        "ram": 512,
        "vcpus": 1,
        "OS-FLV-DISABLED:disabled": false,
        "OS-FLV-EXT-DATA:ephemeral": 0,
        "swap": "",
        "rxtx_factor": 1.0
    }
}
