"""The storage node daemon: one aiohttp.web process per node serving its drives' zone logs.

Modules: `server` (start-up, shutdown, `run_node`), `handlers` (the /v1 record API), `auth`
(request signatures), `body` (splitting a PUT body into payload and metadata blob), `metrics`
(Prometheus), `errors` (JSON errors), `state` (what handlers share), `__main__`
(`python -m zonestore.node`).
"""
