"""The S3 server: the starlette app, uvicorn under `zonegate serve`, its HTTP protocol and limits,
TLS, health endpoints, Prometheus metrics and who may sign requests."""
