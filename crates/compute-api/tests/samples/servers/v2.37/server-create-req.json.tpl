{
    "server": {
        "name": "auto-allocate-network",
        "imageRef": "%(image_id)s",
        "flavorRef": "%(host)s/flavors/1",
        "networks": "auto"
    }
}
