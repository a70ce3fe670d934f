{
    "host": "%(host)s",
    "binary": "%(binary)s",
    "disabled_reason": "%(disabled_reason)s"
}
