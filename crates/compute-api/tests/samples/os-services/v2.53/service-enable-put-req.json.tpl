{
    "status": "enabled"
}
