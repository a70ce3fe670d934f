{
    "server" : {
        "name" : "updated-server-test",
        "description" : "updated-server-description"
    }
}
