{
    "aggregate":
    {
        "name": "name",
        "availability_zone": "london"
    }
}
