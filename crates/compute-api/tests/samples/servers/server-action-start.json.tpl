{
    "%(action)s" : null
}
