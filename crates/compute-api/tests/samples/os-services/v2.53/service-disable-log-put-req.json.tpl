{
    "status": "disabled",
    "disabled_reason": "%(disabled_reason)s"
}
