{
    "status": "disabled"
}
