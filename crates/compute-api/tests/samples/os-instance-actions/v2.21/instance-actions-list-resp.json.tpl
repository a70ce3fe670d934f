{
    "instanceActions": [
        {
            "action": "stop",
            "instance_uuid": "%(uuid)s",
            "request_id": "%(request_id)s",
            "user_id": "%(user_id)s",
            "project_id": "%(project_id)s",
            "start_time": "%(strtime)s",
            "message": null
        },
        {
            "action": "create",
            "instance_uuid": "%(uuid)s",
            "request_id": "%(request_id)s",
            "user_id": "%(user_id)s",
            "project_id": "%(project_id)s",
            "start_time": "%(strtime)s",
            "message": null
        }
    ]
}
