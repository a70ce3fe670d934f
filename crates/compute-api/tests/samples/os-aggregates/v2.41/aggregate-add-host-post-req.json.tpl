{
    "add_host": {
        "host": "%(host_name)s"
    }
}
