{
    "host": "%(host)s",
    "binary": "%(binary)s"
}
