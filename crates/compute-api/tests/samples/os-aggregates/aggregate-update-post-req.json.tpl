{
    "aggregate":
    {
        "name": "newname",
        "availability_zone": "nova2"
    }
}
