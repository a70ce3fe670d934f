{
    "remove_host": {
        "host": "%(host_name)s"
    }
}
