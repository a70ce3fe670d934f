{
    "host": "%(host)s",
    "binary": "%(binary)s",
    "forced_down": %(forced_down)s
}
