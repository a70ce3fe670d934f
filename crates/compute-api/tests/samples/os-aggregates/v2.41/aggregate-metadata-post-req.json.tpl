{
    "set_metadata":
        {
            "metadata":
                {
                    "key": "value"
                }
        }
}
