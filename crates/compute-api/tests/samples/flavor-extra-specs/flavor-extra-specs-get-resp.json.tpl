{
    "hw:numa_nodes": "%(value1)s"
}
