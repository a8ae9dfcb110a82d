"""The worker: the service that runs a process's sessions and adopts a dead
worker's (service.py), its monitor, health server, metrics and the observers
that make it visible outside (fanout_targets.py).  The top room: it may
import every other."""
