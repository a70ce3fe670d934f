{
    "extra_specs": {
        "hw:cpu_policy": "%(value1)s",
        "hw:numa_nodes": "%(value2)s"
    }
}
