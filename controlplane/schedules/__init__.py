"""ScheduleService: a project's cron schedules, each tick a session with a prompt.

timing.py       cron expressions in a time zone, and which due ticks run (the missed-ticks policy)
definitions.py  ScheduleDefinitions: create, read, update, pause, resume, delete; the bounds
scheduler.py    Scheduler: the loop that claims due ticks (once across replicas) and runs them
api.py          the gRPC servicer: protobuf in, ScheduleDefinitions calls, protobuf out
"""
