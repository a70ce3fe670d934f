{
    "reboot" : {
        "type" : "%(type)s"
    }
}
